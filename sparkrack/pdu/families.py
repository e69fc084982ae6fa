"""The PDU models sparkrack speaks, one `Family` per inventory `pdu.model`: which objects a
reading asks for and what they mean, whether the strip switches, and the SETs of an
outlet's timed power cycle (pure; docs/engines.md#the-pdu).

- apc-rpdu2: APC's PowerNet-MIB rPDU2 tables (rpdu2.py), switched and metered by outlet;
- sentry4-switched: Server Technology's Sentry4-MIB (sentry4.py), Switched (and POPS);
- sentry4-metered: the same MIB on a Smart (metered-only) PDU: read, never cycled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkrack.core.errors import UsageError
from sparkrack.inventory.pdu import PduConfig
from sparkrack.pdu import rpdu2, sentry4

Values = Mapping[str, int | str | bytes]
Sets = list[list[tuple[str, int]]]  # SETs in order, each of (oid, value) pairs


@dataclass(frozen=True)
class Family:
    """A PDU model: its MIB, whether it switches, its power cycle's off-time range."""

    model: str
    mib: str
    switched: bool
    off_seconds: tuple[int, int]

    def read_oids(self, outlets: Sequence[int]) -> list[str]:
        """What one GET of a reading asks: the whole load, each outlet's state and power."""
        raise NotImplementedError

    def device_watts(self, values: Values) -> int:
        """The strip's whole load in W (0 when the PDU does not measure it)."""
        raise NotImplementedError

    def outlet(self, values: Values, outlet: int) -> tuple[bool, int | None]:
        """(on, watts) of an outlet; watts None when the PDU does not meter it."""
        raise NotImplementedError

    def switch_oids(self, outlet: int) -> list[str]:
        """What to read before a cycle to learn whether the outlet switches ([]: nothing)."""
        return []

    def switches(self, values: Values, outlet: int) -> bool:
        """Whether the outlet switches, from switch_oids' values."""
        return self.switched

    def cycle_sets(self, outlet: int, off_seconds: int) -> Sets:
        """The SETs that have the PDU cut the outlet for off_seconds and restore it."""
        raise NotImplementedError

    def cut_oids(self, outlet: int) -> list[str]:
        """What to read to see the cycle under way."""
        raise NotImplementedError

    def cut_seen(self, values: Values, outlet: int) -> bool:
        """Whether the outlet reads cut, or its command under way."""
        raise NotImplementedError


class ApcRpdu2(Family):
    """APC's rPDU2: the device's load in hundredths of kW, an outlet's state off(1)/on(2),
    its own reboot duration (5-60 s), immediateReboot."""

    def read_oids(self, outlets):
        return [rpdu2.oid(rpdu2.DEVICE_STATUS_POWER, 1),
                *(rpdu2.oid(column, n) for n in outlets
                  for column in (rpdu2.OUTLET_STATE, rpdu2.OUTLET_POWER))]

    def device_watts(self, values):
        return int(values[rpdu2.oid(rpdu2.DEVICE_STATUS_POWER, 1)]) * 10

    def outlet(self, values, outlet):
        return (values[rpdu2.oid(rpdu2.OUTLET_STATE, outlet)] == rpdu2.STATE_ON,
                max(0, int(values[rpdu2.oid(rpdu2.OUTLET_POWER, outlet)])))

    def cycle_sets(self, outlet, off_seconds):
        return [[(rpdu2.oid(rpdu2.OUTLET_REBOOT_DURATION, outlet), off_seconds)],
                [(rpdu2.oid(rpdu2.OUTLET_COMMAND, outlet), rpdu2.IMMEDIATE_REBOOT)]]

    def cut_oids(self, outlet):
        return [rpdu2.oid(rpdu2.OUTLET_STATE, outlet),
                rpdu2.oid(rpdu2.OUTLET_COMMAND_PENDING, outlet)]

    def cut_seen(self, values, outlet):
        return (values[rpdu2.oid(rpdu2.OUTLET_STATE, outlet)] == rpdu2.STATE_OFF
                or values[rpdu2.oid(rpdu2.OUTLET_COMMAND_PENDING, outlet)]
                == rpdu2.COMMAND_PENDING)


class Sentry4(Family):
    """Sentry4: input cord A's active power in W, an outlet's state on(1)/off(2) and active
    power (-1: not metered, a PDU without per-outlet sensing), whether it is switched (its
    capabilities' switched bit), the reboot delay every outlet shares (5-600 s), reboot(3)."""

    def read_oids(self, outlets):
        return [sentry4.oid(sentry4.CORD_ACTIVE_POWER),
                *(sentry4.oid(column, n) for n in outlets
                  for column in (sentry4.OUTLET_STATE, sentry4.OUTLET_ACTIVE_POWER))]

    def device_watts(self, values):
        return max(0, int(values[sentry4.oid(sentry4.CORD_ACTIVE_POWER)]))

    def outlet(self, values, outlet):
        watts = int(values[sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, outlet)])
        return (values[sentry4.oid(sentry4.OUTLET_STATE, outlet)] == sentry4.STATE_ON,
                None if watts < 0 else watts)

    def switch_oids(self, outlet):
        return [sentry4.oid(sentry4.OUTLET_CAPABILITIES, outlet)]

    def switches(self, values, outlet):
        bits = values[sentry4.oid(sentry4.OUTLET_CAPABILITIES, outlet)]
        first = bits[:1] if isinstance(bits, bytes) else b""
        return bool(first and first[0] & sentry4.SWITCHED_BIT)

    def cycle_sets(self, outlet, off_seconds):
        return [[(sentry4.scalar(sentry4.OUTLET_REBOOT_DELAY), off_seconds)],
                [(sentry4.oid(sentry4.OUTLET_CONTROL_ACTION, outlet), sentry4.ACTION_REBOOT)]]

    def cut_oids(self, outlet):
        return [sentry4.oid(sentry4.OUTLET_STATE, outlet),
                sentry4.oid(sentry4.OUTLET_CONTROL_STATE, outlet)]

    def cut_seen(self, values, outlet):
        return (values[sentry4.oid(sentry4.OUTLET_STATE, outlet)] == sentry4.STATE_OFF
                or values[sentry4.oid(sentry4.OUTLET_CONTROL_STATE, outlet)]
                in sentry4.CONTROL_UNDER_WAY)


FAMILIES = {
    "apc-rpdu2": ApcRpdu2("apc-rpdu2", "APC PowerNet-MIB rPDU2", True, rpdu2.REBOOT_DURATION_S),
    "sentry4-switched": Sentry4("sentry4-switched", "Server Technology Sentry4-MIB", True,
                                sentry4.REBOOT_DELAY_S),
    "sentry4-metered": Sentry4("sentry4-metered", "Server Technology Sentry4-MIB", False,
                               sentry4.REBOOT_DELAY_S),
}


def family_of(pdu: PduConfig) -> Family:
    """The inventory's PDU's family."""
    return FAMILIES[pdu.model]


def refuse_unswitched(pdu: PduConfig, node: str) -> None:
    """UsageError naming the model when the PDU cannot switch an outlet."""
    if not family_of(pdu).switched:
        raise UsageError(f"PDU {pdu.name} is a {pdu.model}: a metered strip that does not "
                         f"switch outlets: sparkrack reads it, never cycles {node}",
                         fix="cut the node's power at the wall, or name a switched model in "
                         "pdu.model (docs/inventory.md#the-pdu)")
