"""Power tasks: the rack's draw against its strip, and power-safe reboots in batches."""

from __future__ import annotations

from invoke import task

from .. import console
from .common import INVENTORY_HELP, WAIT_HELP, inventory_from, operator_task, rack_task
from .engine_tasks import run_burn

BATCH_HELP = "nodes per batch (default: the inventory's restart_batch_size)"


@task(help={"inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def power(c, inventory=None, json=False):
    """Live GPU power per node and the worst-case rack draw vs the strip.

    Each node's cap state too.

    A node counts at its uncapped watts unless a burn this boot verified its cap."""
    from ..safety.power import cap_state_of, project_power
    from ..status import gather_status

    rack = inventory_from(inventory)
    rows = gather_status(rack)
    states = {r.node: cap_state_of(r.facts) for r in rows}
    budget = project_power(rack, states)
    if json:
        console.print_json({"nodes": [{"node": r.node, "reachable": r.reachable,
                                       "gpu_power_w": r.facts.gpu.power_w if r.facts else None,
                                       "sm_mhz": r.facts.gpu.sm_mhz if r.facts else None,
                                       "cap": states[r.node].value} for r in rows],
                            "budget": budget.as_dict()})
    else:
        draws = {d.node: d.watts for d in budget.nodes}
        console.print_table("power", ["node", "gpu power now", "sm MHz", "cap", "worst case W"],
                            [[r.node, f"{r.facts.gpu.power_w:.1f} W" if r.facts and r.facts.gpu.power_w
                              is not None else None, r.facts.gpu.sm_mhz if r.facts else None,
                              states[r.node].value, draws[r.node]] for r in rows])
        print(f"{budget.verdict.upper()}: {budget.reason}")
    if budget.blocking:
        from invoke.exceptions import Exit

        raise Exit(code=1)


@task(name="restart-rack", help={"inventory": INVENTORY_HELP, "batch_size": BATCH_HELP,
                                 "bring_back": "start the last known-good deployment at the end",
                                 **WAIT_HELP})
@rack_task()
def restart_rack(c, inventory=None, batch_size=None, bring_back=False):
    """Stop the engine, reboot every node in batches, verify each batch.

    Each batch's caps are verified after it boots.

    A node that does not come back, or whose GPU is latched or uncapped under load, stops
    the sequence at that batch."""
    from ..lifecycle import restart

    rack = inventory_from(inventory)
    restart.restart_rack(rack, burn=run_burn, batch_size=int(batch_size) if batch_size else None,
                         bring_back=bring_back, on_event=console.say)
    console.say("restart-rack: every node rebooted and verified")


@task(help={"nodes": "comma-separated node names (required)", "inventory": INVENTORY_HELP,
            "batch_size": BATCH_HELP, **WAIT_HELP})
@rack_task()
def reboot(c, nodes, inventory=None, batch_size=None):
    """Reboot some nodes in batches, each verified capped.

    Refused while an engine runs on them."""
    from ..lifecycle import restart

    rack = inventory_from(inventory)
    restart.reboot(rack, rack.select(nodes), burn=run_burn,
                   batch_size=int(batch_size) if batch_size else None, on_event=console.say)
    console.say(f"rebooted and verified: {nodes}")
