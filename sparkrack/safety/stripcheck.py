"""The strip as measured: the PDU's draw now plus what a task would add, against the strip.

The projection (power.py) counts the inventory's nodes at their worst case; the strip also
feeds what the inventory does not know (a switch, a spare node, a monitor). With a PDU in
the inventory, a task that loads the GPUs is judged on what the strip would then carry:
the measured draw now, each node it would load raised from what its outlet draws now to
its worst case (capped watts when a burn verified its cap, uncapped otherwise). Passing
the strip refuses, as the projection does; `--override-power REASON` passes both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.inventory import Inventory
from sparkrack.pdu import StripReading, read_strip


@dataclass(frozen=True)
class StripCheck:
    """Measured draw plus a task's addition, against the strip rating."""

    pdu: str
    measured_watts: int
    adds_watts: int
    strip_watts: int
    what: str  # "up would add", "batch 2's burn would add"
    reading: StripReading | None = None  # what the PDU read

    @property
    def total_watts(self) -> int:
        return self.measured_watts + self.adds_watts

    @property
    def blocking(self) -> bool:
        return self.total_watts > self.strip_watts

    def as_dict(self) -> dict:
        """Plain JSON-ready data (the reading's outlets included)."""
        return {"pdu": self.pdu, "measured_watts": self.measured_watts,
                "adds_watts": self.adds_watts, "total_watts": self.total_watts,
                "strip_watts": self.strip_watts, "blocking": self.blocking,
                "reason": self.reason, "reading": self.reading.as_dict() if self.reading else None}

    @property
    def reason(self) -> str:
        """One line: measured + added = total against the strip."""
        judged = ">" if self.blocking else "<="
        return (f"measured {self.measured_watts:,} W on {self.pdu} + {self.adds_watts:,} W "
                f"{self.what} = {self.total_watts:,} W {judged} {self.strip_watts:,} W strip")


def strip_check(reading: StripReading, worst: Mapping[str, int], strip_watts: int,
                what: str) -> StripCheck:
    """The check for loading each node of worst to its watts: what each adds over its
    outlet's draw now (a node on no outlet adds all of it)."""
    adds = 0
    for node, watts in worst.items():
        outlet = reading.of(node)
        now = outlet.watts if outlet and outlet.on and outlet.watts is not None else 0
        adds += max(0, watts - now)  # an outlet not metered: the node's whole worst case
    return StripCheck(reading.pdu, reading.measured_watts, adds, strip_watts, what, reading)


def measured_strip(inventory: Inventory, worst: Mapping[str, int], what: str
                   ) -> tuple[StripCheck | None, str | None]:
    """(the check, None) with a PDU that answers; (None, why it was not read) when it does
    not; (None, None) when the inventory names no PDU."""
    if inventory.vars.pdu is None:
        return None, None
    try:
        reading = read_strip(inventory)
    except SparkrackError as error:
        return None, (f"{error.line()}; judged on the projection alone")
    return strip_check(reading, worst, inventory.vars.power_strip_watts, what), None
