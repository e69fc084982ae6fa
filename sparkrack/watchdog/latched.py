"""The watchdog's power cycle of a node whose GPU latched in its low-clock state while its
group was busy: what `invoke power-cycle -n NODE` does (lifecycle/powercycle.py: the group
stopped in order, the PDU's timed cycle, the node waited for and burned), under the rack
lock and in an audit record of its own (task `watchdog.power-cycle`), and only when the
watchdog was installed with `watch.install --allow-power-cycle`. Without it, or without a
PDU feeding the node, the watchdog says why and leaves the node to its operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.powercycle import OFF_SECONDS, plan_cycle, power_cycle
from sparkrack.oplock import audit
from sparkrack.oplock.guard import Guard
from sparkrack.safety.burn import burn

TASK = "watchdog.power-cycle"
BURN_SECONDS = 1.5


class Cycled(NamedTuple):
    """What the watchdog's power cycle did: ok when the node came back out of its latch."""

    ok: bool
    line: str


def cycle_latched(inventory: Inventory, node: str, *, allowed: bool,
                  say: Callable[[str], None], off_seconds: int = OFF_SECONDS) -> Cycled:
    """Power-cycle node for its latched GPU if allowed; one line saying what was done (or
    why not). Never raises: the watchdog goes on watching."""
    if not allowed:
        return Cycled(False, f"{node}: GPU latched; not power-cycled (the watchdog was "
                      f"installed without --allow-power-cycle): `invoke power-cycle -n {node}`")
    if inventory.vars.pdu is None or inventory.vars.pdu.outlet_of(node) is None:
        return Cycled(False, f"{node}: GPU latched; no PDU outlet feeds it in the inventory: "
                      "not power-cycled")
    guard = Guard(inventory, TASK, {"node": node, "off_seconds": off_seconds}, on_event=say)
    try:
        guard.begin(None)
    except SparkrackError as error:
        return Cycled(False, f"{node}: GPU latched; not power-cycled: {error.line()}")
    outcome, error_line, code = "failed", None, 1
    try:
        with audit.active(guard.record):
            target = inventory.node(node)
            with Fleet(inventory) as fleet:
                plan = plan_cycle(inventory, target, off_seconds, fleet)
            line = power_cycle(inventory, target, plan, on_event=say,
                               burn=lambda rack, nodes: burn(rack, nodes, seconds=BURN_SECONDS))
        outcome, code = "ok", 0
        return Cycled(True, line)
    except SparkrackError as error:
        error_line = error.line()
        return Cycled(False, f"{node}: GPU latched; power cycle failed: {error_line}")
    finally:
        guard.end(outcome, error=error_line, exit_code=code)
