"""What the rehearsal PDU's agent answers, per inventory `pdu.model`: each MIB's objects as
rows (column, kind, access, read, write, allowed values, instances), read live from a `Pdu`
(pduagent.py), and the subtrees a SET may write. The objects are those sparkrack uses
(sparkrack/pdu/rpdu2.py, sentry4.py) and a few an operator reads with snmpget beside them.
A metered-only model has no control table and no writable subtree: a SET is refused as on
such a PDU (docs/rehearsal.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrack.pdu import rpdu2, sentry4

VOLTS = 120  # the field report's strip: 1,440 W is 12 A at 120 V
APC_COMMANDS = {rpdu2.IMMEDIATE_ON: (False, False, True),
                rpdu2.IMMEDIATE_OFF: (True, False, False),
                rpdu2.IMMEDIATE_REBOOT: (True, True, True),
                5: (False, False, True), 6: (True, False, False),  # delayedOn, delayedOff and
                7: (True, True, True)}  # delayedReboot run at once here (no delay configured)
APC_CANCEL = 8  # cancelPendingCommand
SENTRY4_ACTIONS = {sentry4.ACTION_NONE: (False, False, False),
                   sentry4.ACTION_ON: (False, False, True),
                   sentry4.ACTION_OFF: (True, False, False),
                   sentry4.ACTION_REBOOT: (True, True, True)}  # queued actions: not simulated


@dataclass(frozen=True)
class Row:
    """One column and its instances: each instance's value read (and written) through
    functions of the instance's outlet (None for a device-wide one)."""

    column: tuple[int, ...]
    kind: str  # "integer", "text" or "bits"
    access: str
    read: Callable[[int | None], Any]
    instances: tuple[tuple[tuple[int, ...], int | None], ...]  # (index, outlet)
    write: Callable[[int | None, int], None] | None = None
    allowed: range | tuple[int, ...] | None = None


def rows(pdu) -> tuple[list[Row], tuple[tuple[int, ...], ...]]:
    """pdu's model's rows and its writable subtrees."""
    if pdu.model == "apc-rpdu2":
        return _apc(pdu), (rpdu2.RPDU2 + (9, 2, 1), rpdu2.RPDU2 + (9, 2, 4))
    switched = pdu.model == "sentry4-switched"
    writable = (sentry4.ST4 + (8, 1), sentry4.ST4 + (8, 5)) if switched else ()
    return _sentry4(pdu, switched), writable


def _apc(pdu) -> list[Row]:
    outlets = pdu.outlets
    device = ((1,), None),
    each = tuple(((n,), n) for n in pdu.numbers)
    low, high = rpdu2.REBOOT_DURATION_S
    return [
        Row(rpdu2.IDENT_NAME, "text", "read-only", lambda n: outlets.name, device),
        Row(rpdu2.DEVICE_PROPERTIES_NUM_OUTLETS, "integer", "read-only",
            lambda n: outlets.count, device),
        Row(rpdu2.DEVICE_STATUS_POWER, "integer", "read-only",
            lambda n: round(pdu.total_watts() / 10), device),  # hundredths of kW
        Row(rpdu2.OUTLET_CONFIG_NAME, "text", "read-only", outlets.label, each),
        Row(rpdu2.OUTLET_REBOOT_DURATION, "integer", "read-write", pdu.reboot_s.__getitem__,
            each, pdu.reboot_s.__setitem__, range(low, high + 1)),
        Row(rpdu2.OUTLET_STATE, "integer", "read-only",
            lambda n: rpdu2.STATE_ON if outlets.is_on(n) else rpdu2.STATE_OFF, each),
        Row(rpdu2.OUTLET_COMMAND_PENDING, "integer", "read-only",
            lambda n: rpdu2.COMMAND_PENDING if n in pdu.pending else rpdu2.NO_COMMAND_PENDING,
            each),
        Row(rpdu2.OUTLET_COMMAND, "integer", "read-write",
            lambda n: rpdu2.IMMEDIATE_ON if outlets.is_on(n) else rpdu2.IMMEDIATE_OFF, each,
            lambda n, value: pdu.command(n, APC_COMMANDS.get(value), value == APC_CANCEL),
            (*APC_COMMANDS, APC_CANCEL)),
        Row(rpdu2.OUTLET_CURRENT, "integer", "read-only",
            lambda n: round(outlets.watts(n) * 10 / VOLTS), each),  # tenths of A
        Row(rpdu2.OUTLET_POWER, "integer", "read-only", outlets.watts, each)]


def _sentry4(pdu, switched: bool) -> list[Row]:
    outlets = pdu.outlets
    cord = ((sentry4.UNIT, sentry4.CORD), None),
    scalar = ((0,), None),
    each = tuple(((sentry4.UNIT, sentry4.CORD, n), n) for n in pdu.numbers)
    low, high = sentry4.REBOOT_DELAY_S
    pops = 0x40  # pops(1): per-outlet power sensing, so each outlet is metered
    capabilities = bytes([(sentry4.SWITCHED_BIT if switched else 0) | pops])

    def control_state(n: int) -> int:
        if not switched:
            return sentry4.CONTROL_FIXED_ON
        if n in pdu.pending:
            return 12 if not outlets.is_on(n) else 13  # reboot, shutdown: under way
        return sentry4.CONTROL_ON if outlets.is_on(n) else sentry4.CONTROL_OFF

    found = [
        Row(sentry4.CORD_ACTIVE_POWER, "integer", "read-only", lambda n: pdu.total_watts(),
            cord),
        Row(sentry4.OUTLET_NAME, "text", "read-only", outlets.label, each),
        Row(sentry4.OUTLET_CAPABILITIES, "bits", "read-only", lambda n: capabilities, each),
        Row(sentry4.OUTLET_STATE, "integer", "read-only",
            lambda n: sentry4.STATE_ON if outlets.is_on(n) else sentry4.STATE_OFF, each),
        Row(sentry4.OUTLET_CURRENT, "integer", "read-only",
            lambda n: round(outlets.watts(n) * 100 / VOLTS), each),  # hundredths of A
        Row(sentry4.OUTLET_ACTIVE_POWER, "integer", "read-only", outlets.watts, each),
        Row(sentry4.OUTLET_CONTROL_STATE, "integer", "read-only", control_state, each)]
    if switched:
        found += [
            Row(sentry4.OUTLET_REBOOT_DELAY, "integer", "read-write",
                lambda n: pdu.reboot_s[1], scalar, lambda n, value: pdu.reboot_s.update(
                    dict.fromkeys(pdu.numbers, value)), range(low, high + 1)),
            Row(sentry4.OUTLET_CONTROL_ACTION, "integer", "read-write",
                lambda n: sentry4.ACTION_NONE, each,
                lambda n, value: pdu.command(n, SENTRY4_ACTIONS[value]),
                tuple(SENTRY4_ACTIONS))]
    return found
