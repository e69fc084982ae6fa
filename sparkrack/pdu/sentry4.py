"""The Sentry4-MIB objects sparkrack reads and writes for models sentry4-switched and
sentry4-metered (Server Technology's fourth-generation PRO1/PRO2 PDUs, pure).

sentry4 is `1.3.6.1.4.1.1718.4`, st4Objects its `.1`. The outlet tables are indexed by
unit (A=1), input cord (A=1) and outlet; sparkrack reads unit A's cord A, whose outlets the
PDU labels AA1, AA2, ...: the inventory's outlet N is AAN. Public source: Server
Technology's Sentry4-MIB, revision 201706151830Z (docs/field-notes.md#the-pdu).
"""

from __future__ import annotations

ST4 = (1, 3, 6, 1, 4, 1, 1718, 4, 1)  # st4Objects
UNIT, CORD = 1, 1  # unit A, input cord A

# st4InputCordMonitorTable (st4InputCords 3 1), by unit and cord: active power in W
# (-1..50000; -1: not measured)
CORD_ACTIVE_POWER = ST4 + (3, 3, 1, 3)
# st4OutletCommonConfig (st4Outlets 1): the reboot delay of every outlet, 5-600 s (scalar)
OUTLET_REBOOT_DELAY = ST4 + (8, 1, 11)
# st4OutletConfigTable (st4Outlets 2 1): the outlet's name; its capabilities, BITS
# switched(0) pops(1)
OUTLET_NAME = ST4 + (8, 2, 1, 3)
OUTLET_CAPABILITIES = ST4 + (8, 2, 1, 5)
# st4OutletMonitorTable (st4Outlets 3 1): state unknown(0) on(1) off(2); current in
# hundredths of A; active power in W (-1..10000; -1: not measured)
OUTLET_STATE = ST4 + (8, 3, 1, 1)
OUTLET_CURRENT = ST4 + (8, 3, 1, 3)
OUTLET_ACTIVE_POWER = ST4 + (8, 3, 1, 7)
# st4OutletControlTable (st4Outlets 5 1): the control state, and the action to take
OUTLET_CONTROL_STATE = ST4 + (8, 5, 1, 1)
OUTLET_CONTROL_ACTION = ST4 + (8, 5, 1, 2)

STATE_UNKNOWN, STATE_ON, STATE_OFF = 0, 1, 2
NOT_MEASURED = -1
SWITCHED_BIT = 0x80  # BITS: bit 0, switched(0), is the first octet's high bit
ACTION_NONE, ACTION_ON, ACTION_OFF, ACTION_REBOOT = 0, 1, 2, 3
QUEUE_ACTIONS = (4, 5, 6)  # queueOn, queueOff, queueReboot: run at st4OutletQueueControl
# st4OutletControlState values while a command is under way: pendOn(8) "is off, but will be
# turning on", pendOff(9), reboot(12) "preparing to turn on", shutdown(13)
CONTROL_FIXED_ON = 1  # fixedOn: "outlet is uncontrolled (assumed on)"
CONTROL_OFF, CONTROL_ON = 10, 11
CONTROL_UNDER_WAY = (8, 9, 12, 13)
REBOOT_DELAY_S = (5, 600)  # st4OutletRebootDelay's range


def oid(column: tuple[int, ...], outlet: int | None = None) -> str:
    """A column's instance, dotted: a unit-and-cord column's (outlet None) or an outlet's
    of unit A, cord A."""
    index = (UNIT, CORD) if outlet is None else (UNIT, CORD, outlet)
    return ".".join(str(part) for part in column + index)


def scalar(name: tuple[int, ...]) -> str:
    """A scalar object's instance (.0), dotted."""
    return ".".join(str(part) for part in name + (0,))
