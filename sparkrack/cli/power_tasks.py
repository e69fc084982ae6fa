"""The GPUs' power and clocks, top-level commands: `power` (the draw against the strip),
`burn` (the clock cap under load), `reboot`, `restart-rack` and `power-cycle`."""

from __future__ import annotations

from invoke.exceptions import Exit

from sparkrack.cli.common import (
    INVENTORY_HELP,
    WAIT_HELP,
    inventory_from,
    operator_task,
    rack_task,
)
from sparkrack.cli.flags import LIMIT_HELP, RENAMED_LIMIT, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = None

BATCH_HELP = "nodes per batch (default: the inventory's restart_batch_size)"


@task(help={"inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def power(c, inventory=None, json=False):
    """Live GPU power per node and the worst-case rack draw vs the strip.

    Each node's cap state, and with a PDU the strip and each outlet as measured. A node
    counts at its uncapped watts unless a burn this boot verified its cap; the measured
    strip plus each node raised to its worst case is judged too."""
    from sparkrack.safety.power import cap_state_of, project_power
    from sparkrack.safety.stripcheck import measured_strip
    from sparkrack.status.rows import gather_status

    rack = inventory_from(inventory)
    rows = gather_status(rack)
    states = {r.node: cap_state_of(r.facts) for r in rows}
    budget = project_power(rack, states)
    draws = {d.node: d.watts for d in budget.nodes}
    strip, unread = measured_strip(rack, draws, "the rack would add at its worst case")
    outlets = {o.node: o for o in (strip.reading.outlets if strip and strip.reading else ())}
    if json:
        console.print_json({"nodes": [{"node": r.node, "reachable": r.reachable,
                                       "gpu_power_w": r.facts.gpu.power_w if r.facts else None,
                                       "sm_mhz": r.facts.gpu.sm_mhz if r.facts else None,
                                       "outlet_w": outlets[r.node].watts if r.node in outlets
                                       else None,
                                       "cap": states[r.node].value} for r in rows],
                            "budget": budget.as_dict(),
                            "strip": strip.as_dict() if strip else None,
                            "strip_unread": unread})
    else:
        console.print_table("power", ["node", "gpu power now", "sm MHz", "cap", "outlet now",
                                      "worst case W"],
                            [[r.node, f"{r.facts.gpu.power_w:.1f} W" if r.facts and r.facts.gpu.power_w
                              is not None else None, r.facts.gpu.sm_mhz if r.facts else None,
                              states[r.node].value, _outlet(outlets.get(r.node)),
                              draws[r.node]] for r in rows])
        print(f"projected {budget.verdict.upper()}: {budget.reason}")
        if strip is not None:
            print(f"measured {'REFUSE' if strip.blocking else 'OK'}: {strip.reason}")
        elif unread:
            print(f"measured: not read: {unread}")
    if budget.blocking or (strip is not None and strip.blocking):
        raise Exit(code=1)


def _outlet(outlet) -> str | None:
    """An outlet's cell: '31 W (outlet 1)', 'off (outlet 1)', 'on (outlet 1)' where the PDU
    does not meter outlets, or None without a PDU."""
    if outlet is None:
        return None
    if not outlet.on:
        return f"off (outlet {outlet.outlet})"
    return f"{outlet.watts} W (outlet {outlet.outlet})" if outlet.watts is not None else \
        f"on (outlet {outlet.outlet})"


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP,
            "seconds": "how long the load runs (default 5)", "json": "print JSON", **WAIT_HELP})
@rack_task()
def burn(c, inventory=None, limit=None, seconds=5.0, json=False):
    """Load every GPU, sample its clock: ok, UNCAPPED or LATCHED per node.

    SM clock and power are sampled on every GPU at once.

    Records the verdict on each node (`invoke status` shows it). Exit 1 if any node is not
    ok."""
    from sparkrack.inventory.ranges import number
    from sparkrack.safety.burn import burn as burn_check
    from sparkrack.safety.gateburn import BURN_SECONDS

    rack = inventory_from(inventory)
    seconds = float(seconds)
    if BURN_SECONDS.problem(seconds):
        raise UsageError(f"--seconds {seconds:g} out of range",
                         fix=f"give {number(BURN_SECONDS.low)}..{number(BURN_SECONDS.high)}")
    results = burn_check(rack, limit, seconds)
    from sparkrack.facts.node import BURN_RECORD
    from sparkrack.oplock.audit import note

    note(nodes=[r.node for r in results if r.recorded], files=[BURN_RECORD],
         burn={r.node: r.verdict for r in results})
    if json:
        console.print_json([r.as_dict() for r in results])
    else:
        console.print_table(
            f"burn check ({seconds:g} s under load)",
            ["node", "verdict", "max SM MHz", "max power", "cap MHz", "samples", "reason"],
            [[r.node, r.verdict, r.max_sm_mhz,
              None if r.max_power_w is None else f"{r.max_power_w:.1f} W", r.cap_mhz,
              len(r.samples), r.reason] for r in results])
    bad = [r for r in results if not r.ok]
    if bad:
        raise Exit(f"{len(bad)} of {len(results)} node(s) failed the burn check: "
                   + ", ".join(f"{r.node} {r.verdict}" for r in bad), code=1)


@task(name="restart-rack", help={"inventory": INVENTORY_HELP, "batch_size": BATCH_HELP,
                                 "bring_back": "start the last known-good deployment at the end",
                                 **WAIT_HELP})
@rack_task()
def restart_rack(c, inventory=None, batch_size=None, bring_back=False):
    """Stop the engine, reboot every node in batches, verify each batch.

    Each batch's caps are verified after it boots.

    A node that does not come back, or whose GPU is latched or uncapped under load, stops
    the sequence at that batch."""
    from sparkrack.lifecycle import restart

    rack = inventory_from(inventory)
    restart.restart_rack(rack, batch_size=int(batch_size) if batch_size else None,
                         bring_back=bring_back, on_event=console.say)
    console.say("restart-rack: every node rebooted and verified")


@task(renamed=RENAMED_LIMIT, help={"limit": "the nodes to reboot, e.g. spark-02,spark-06 (required)", "inventory": INVENTORY_HELP,
            "batch_size": BATCH_HELP, **WAIT_HELP})
@rack_task()
def reboot(c, limit, inventory=None, batch_size=None):
    """Reboot some nodes in batches, each verified capped.

    Refused while an engine runs on them."""
    from sparkrack.lifecycle import restart

    rack = inventory_from(inventory)
    restart.reboot(rack, rack.select(limit), batch_size=int(batch_size) if batch_size else None,
                   on_event=console.say)
    console.say(f"rebooted and verified: {limit}")


@task(name="power-cycle", help={
    "node": "the node whose power the PDU removes (required)",
    "off_seconds": "how long the outlet stays off: 5-60 on apc-rpdu2, 5-600 on sentry4 "
                   "(default 10)",
    "check": "show the plan (outlet, what stops, the wait) and change nothing",
    "timeout": "seconds the node has to come back after the power returns (default 300)",
    "inventory": INVENTORY_HELP, **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"])
def power_cycle(c, node, off_seconds=10, check=False, timeout=None, inventory=None):
    """Power-cycle a node through the PDU: the one fix for a latched GPU.

    Its power is removed for a while, then restored; a GPU latched in its low-clock state
    clears. A running TP group is stopped first, in order. Waits until the node answers with
    its clock-cap unit active, then burns its GPU."""
    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle.powercycle import plan_cycle
    from sparkrack.lifecycle.powercycle import power_cycle as carry_out
    from sparkrack.lifecycle.restart import NODE_TIMEOUT

    rack = inventory_from(inventory)
    target = rack.node(node)
    with Fleet(rack) as fleet:
        plan = plan_cycle(rack, target, int(off_seconds), fleet)
    for line in plan.lines():
        console.say(f"plan: {line}")
    if check:
        console.say("--check: nothing done")
        return
    console.say(carry_out(rack, target, plan, on_event=console.say,
                          timeout=float(timeout) if timeout else NODE_TIMEOUT))
