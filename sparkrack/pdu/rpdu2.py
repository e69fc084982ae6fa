"""The PowerNet-MIB objects sparkrack reads and writes for model apc-rpdu2 (APC's rPDU2
tables, pure).

rPDU2 is `1.3.6.1.4.1.318.1.1.26`, the group APC's metered-by-outlet switched rack PDUs
(AP84xx, AP86xx, AP88xx, AP89xx) answer. Each table is indexed by outlet number on a
single PDU (index 1 for the device tables). Public source: APC's PowerNet-MIB, v4.5.2
(docs/field-notes.md#the-pdu).
"""

from __future__ import annotations

RPDU2 = (1, 3, 6, 1, 4, 1, 318, 1, 1, 26)

# rPDU2DeviceStatusTable (rPDU2 4 3 1): the whole load, in hundredths of kW
DEVICE_STATUS_POWER = RPDU2 + (4, 3, 1, 5)
# rPDU2DevicePropertiesTable (rPDU2 4 2 1): how many outlets the PDU has
DEVICE_PROPERTIES_NUM_OUTLETS = RPDU2 + (4, 2, 1, 4)
# rPDU2IdentTable (rPDU2 2 1): the PDU's user-defined name
IDENT_NAME = RPDU2 + (2, 1, 3)
# rPDU2OutletSwitchedConfigTable (rPDU2 9 2 1 1): the outlet's name; how long a reboot
# keeps it off, 5-60 s
OUTLET_CONFIG_NAME = RPDU2 + (9, 2, 1, 1, 3)
OUTLET_REBOOT_DURATION = RPDU2 + (9, 2, 1, 1, 7)
# rPDU2OutletSwitchedStatusTable (rPDU2 9 2 3 1): off(1), on(2); a command pending
OUTLET_STATE = RPDU2 + (9, 2, 3, 1, 5)
OUTLET_COMMAND_PENDING = RPDU2 + (9, 2, 3, 1, 6)
# rPDU2OutletSwitchedControlTable (rPDU2 9 2 4 1): the command
OUTLET_COMMAND = RPDU2 + (9, 2, 4, 1, 5)
# rPDU2OutletMeteredStatusTable (rPDU2 9 4 3 1): current in tenths of A, power in W
OUTLET_CURRENT = RPDU2 + (9, 4, 3, 1, 6)
OUTLET_POWER = RPDU2 + (9, 4, 3, 1, 7)

STATE_OFF, STATE_ON = 1, 2
COMMAND_PENDING, NO_COMMAND_PENDING = 1, 2
IMMEDIATE_ON, IMMEDIATE_OFF, IMMEDIATE_REBOOT = 1, 2, 3
REBOOT_DURATION_S = (5, 60)  # rPDU2OutletSwitchedConfigRebootDuration's range


def oid(column: tuple[int, ...], index: int) -> str:
    """A column's instance for one row, dotted: '1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.3'."""
    return ".".join(str(part) for part in column + (index,))
