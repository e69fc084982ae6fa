"""The strip as the PDU measures it, and an outlet's timed power cycle, in the objects of
the inventory's `pdu.model` (families.py).

A reading is one GET: the PDU's whole load and, for every node the inventory maps to an
outlet, the outlet's state and its draw in watts (None where the PDU does not meter
outlets). The strip's measured draw is the larger of the PDU's total and the mapped outlets'
sum, so a load on an outlet no node owns (a switch, a monitor, a spare) counts.

A power cycle is the PDU's own: the off time is set (the model's range), then its reboot
command: the PDU cuts the outlet, waits, and restores it itself, so a node comes back even
if this machine loses the PDU in between. A metered-only model is refused before anything
is sent, and an outlet the PDU says does not switch is refused before any SET.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkrack.core.errors import UsageError
from sparkrack.inventory import Inventory
from sparkrack.pdu.families import family_of, refuse_unswitched
from sparkrack.pdu.snmp import PduError, Session

SWITCH_SEEN_S = 10.0  # how long the outlet may take to report the cut after the command


@dataclass(frozen=True)
class OutletReading:
    """One node's outlet: its number, whether it is on, what it draws now (None: the PDU
    does not meter its outlets)."""

    node: str
    outlet: int
    on: bool
    watts: int | None


@dataclass(frozen=True)
class StripReading:
    """The PDU's reading: its whole load and each mapped node's outlet."""

    pdu: str
    device_watts: int
    outlets: tuple[OutletReading, ...]

    @property
    def measured_watts(self) -> int:
        """The strip's draw now: the PDU's total, or the mapped outlets' sum if larger."""
        return max(self.device_watts, sum(o.watts or 0 for o in self.outlets))

    def of(self, node: str) -> OutletReading | None:
        """The node's outlet reading (None: on no outlet)."""
        return next((o for o in self.outlets if o.node == node), None)

    def as_dict(self) -> dict:
        """Plain JSON-ready data."""
        return {"pdu": self.pdu, "measured_watts": self.measured_watts,
                "device_watts": self.device_watts,
                "outlets": [{"node": o.node, "outlet": o.outlet, "on": o.on,
                             "watts": o.watts} for o in self.outlets]}


def session_of(inventory: Inventory) -> Session:
    """A session to the inventory's PDU (UsageError when it names none)."""
    pdu = inventory.vars.pdu
    if pdu is None:
        raise UsageError(f"{inventory.path}: no pdu: section",
                         fix="name the rack's PDU in group_vars/all.yml (docs/inventory.md)")
    return Session(pdu)


def read_strip(inventory: Inventory, session: Session | None = None) -> StripReading:
    """The strip now, in one GET (PduError when the PDU does not answer)."""
    session = session or session_of(inventory)
    family = family_of(session.pdu)
    outlets = session.pdu.outlets
    values = session.get(family.read_oids([number for _, number in outlets]))
    return StripReading(session.pdu.name, family.device_watts(values), tuple(
        OutletReading(node, number, *family.outlet(values, number))
        for node, number in outlets))


def cycle_outlet(inventory: Inventory, node: str, off_seconds: int,
                 session: Session | None = None,
                 on_event: Callable[[str], None] = lambda e: None) -> int:
    """Have the PDU cut node's outlet for off_seconds and restore it; returns the outlet.
    Waits until the outlet reports the cut (PduError if it never does)."""
    pdu = session.pdu if session else inventory.vars.pdu
    if pdu is not None:
        refuse_unswitched(pdu, node)
        low, high = family_of(pdu).off_seconds
        if not low <= off_seconds <= high:
            raise UsageError(f"--off-seconds {off_seconds}: PDU {pdu.name} ({pdu.model}) keeps "
                             f"an outlet off for {low}-{high} s in a power cycle",
                             fix=f"give {low}..{high}")
    session = session or session_of(inventory)
    family = family_of(session.pdu)
    outlet = session.pdu.outlet_of(node)
    if outlet is None:
        raise UsageError(f"{node} is on no outlet of PDU {session.pdu.name}",
                         fix="map it in the inventory's pdu: outlets")
    asked = family.switch_oids(outlet)
    if asked and not family.switches(session.get(asked), outlet):
        raise PduError(f"PDU {session.pdu.name} ({session.pdu.model}) outlet {outlet} ({node}) "
                       "does not switch: the PDU reports it metered only",
                       fix="cut the node's power at the wall, or move its cord to a "
                       "switched outlet and map that one")
    for pairs in family.cycle_sets(outlet, off_seconds):
        session.set(pairs)
    on_event(f"{session.pdu.name} outlet {outlet} ({node}): off for {off_seconds} s, "
             "then on (the PDU's own power cycle)")
    deadline = time.monotonic() + SWITCH_SEEN_S
    while time.monotonic() < deadline:
        if family.cut_seen(session.get(family.cut_oids(outlet)), outlet):
            return outlet
        time.sleep(0.5)
    raise PduError(f"PDU {session.pdu.name} outlet {outlet} ({node}) took the power cycle but "
                   f"did not report it within {SWITCH_SEEN_S:.0f} s",
                   fix="look at the outlet on the PDU's own interface")
