"""Power-cycle one node through the PDU (`invoke power-cycle -n NODE`): the one fix for a
GB10 latched in its low-clock state, which survives a reboot and a driver reload and clears
only when the power is fully removed.

Plan (pure facts, `--check` shows it): the node's outlet, how long it stays off, and what
runs. A TP8 group cannot lose one rank: while a group runs on the rack, its every rank is
stopped first, in order (rank 0 first so it drains, then the workers), its record cleared,
and it is not started again: `invoke up` does that once the node is back (its gates burn
every GPU again). Apply, under the rack lock and in the audit record: that stop, then the
PDU's own timed cycle (the outlet off for the given seconds, then on: the PDU restores it
even if this machine loses it meanwhile), then the node must answer with a new boot id and
its clock-cap unit active this boot within the timeout, and a short burn says whether the
GPU is out of its latch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.deployments.running import running
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.lifecycle.lanes import down
from sparkrack.lifecycle.order import STOP_ORDER_REASON
from sparkrack.lifecycle.restart import NODE_TIMEOUT, RebootStopped, boot_ids, wait_back
from sparkrack.oplock.audit import note
from sparkrack.oplock.lock import lease_while_down
from sparkrack.pdu import cycle_outlet
from sparkrack.pdu.families import family_of, refuse_unswitched
from sparkrack.safety import gateburn

OFF_SECONDS = 10  # a GB10's brick drained; APC's rPDU2 allows 5-60 s, Sentry4 5-600 s


@dataclass
class CyclePlan:
    """What `power-cycle` would do."""

    node: str
    pdu: str
    outlet: int
    off_seconds: int
    group: str | None = None  # the running deployment that would be stopped
    ranks: list[str] = field(default_factory=list)  # "rank 0 on spark-01", in stop order

    def lines(self) -> list[str]:
        """The plan as an operator reads it."""
        stop = (f"stop {self.group} first, in order ({STOP_ORDER_REASON}): "
                f"{', '.join(self.ranks)}; it is not started again (`invoke up` after)"
                if self.group else "no engine runs: nothing to stop")
        return [stop,
                f"{self.pdu} outlet {self.outlet} ({self.node}): off {self.off_seconds} s, "
                "then on (the PDU's own power cycle: no clean shutdown)",
                f"wait for {self.node}: new boot id, clock-cap unit active this boot; a "
                "burn says whether the GPU left its latch"]


def plan_cycle(inventory: Inventory, node: Node, off_seconds: int, fleet: Fleet) -> CyclePlan:
    """The plan for node (UsageError when no PDU feeds it or the time is out of range)."""
    pdu = inventory.vars.pdu
    if pdu is None:
        raise UsageError(f"{inventory.path}: no pdu: section: nothing can cut {node.name}'s "
                         "power", fix="name the rack's PDU and its outlets (docs/inventory.md)")
    refuse_unswitched(pdu, node.name)
    outlet = pdu.outlet_of(node.name)
    if outlet is None:
        raise UsageError(f"{node.name} is on no outlet of PDU {pdu.name}",
                         fix="map it in the inventory's pdu: outlets")
    low, high = family_of(pdu).off_seconds
    if not low <= off_seconds <= high:
        raise UsageError(f"--off-seconds {off_seconds}: PDU {pdu.name} ({pdu.model}) keeps an "
                         f"outlet off {low}-{high} s in a power cycle",
                         fix=f"give {low}..{high}, e.g. {OFF_SECONDS}")
    found = running(fleet)
    plan = CyclePlan(node.name, pdu.name, outlet, off_seconds)
    if found.deployment:
        ranks = sorted((r for r in found.alive if r.deployment == found.deployment),
                       key=lambda r: (r.rank != 0, r.rank))
        plan.group = f"{ranks[0].engine} {ranks[0].profile} ({found.deployment})"
        plan.ranks = [f"rank {r.rank} on {r.node}" for r in ranks]
    return plan


def power_cycle(inventory: Inventory, node: Node, plan: CyclePlan, *, timeout: float = NODE_TIMEOUT,
                on_event: Callable[[str], None] = lambda e: None,
                before_cut: Callable[[str], None] = lambda boot_id: None,
                away: Sequence[str] = (), silent: bool = False) -> str:
    """Carry out plan; returns the burn's verdict line. RebootStopped when the node is not
    back in time, SparkrackError when the group could not be stopped or the PDU refused.
    before_cut(boot id) runs once the group is stopped, before the outlet is cut (the
    watchdog keeps its pending restart there); the lock is leased while node is down, or
    any node of away (the one the lock's own process runs on). silent: the node answers
    nothing (a wedged host): its rank goes with the cut, its boot id is unknown (any boot
    id it answers with after the cut is a new one)."""
    if plan.group:
        stopped = down(inventory, on_event=on_event)
        errors = {k: v for k, v in stopped.errors.items()  # k: a node, or container@node
                  if not (silent and k.rpartition("@")[2] == node.name)}
        if errors:
            raise SparkrackError(f"could not stop {plan.group} cleanly: " + "; ".join(
                f"{k}: {v}" for k, v in errors.items()),
                fix="nothing was power-cycled; fix the nodes named, then retry")
    with Fleet(inventory, [node]) as fleet:
        before = {node.name: ""} if silent else boot_ids(fleet, [node], inventory.head.name)[0]
        before_cut(before[node.name])
        with lease_while_down([node.name, *away], plan.off_seconds + timeout + 60):
            cycle_outlet(inventory, node.name, plan.off_seconds, on_event=on_event)
            note(nodes=[node.name], power_cycled=[node.name],
                 outlets=[f"{plan.pdu}:{plan.outlet}"])
            wait_back(fleet, [node], before, plan.off_seconds + timeout, on_event)
    return burned(inventory, node)


def burned(inventory: Inventory, node: Node) -> str:
    """A node back from its power cycle, burned: the verdict line; RebootStopped when its
    GPU is still latched (or not capped)."""
    verdict = gateburn.gate_burn(inventory, [node])[0]
    note(burn=[f"{verdict.node}: {verdict.verdict}"])
    if not verdict.ok:
        raise RebootStopped(f"{node.name} came back but {verdict.reason}",
                            fix="a latch that survives a power cycle wants a longer one "
                            "(--off-seconds 60) or the power brick checked")
    return f"{node.name}: back, cap unit active this boot, burn {verdict.verdict}: {verdict.reason}"
