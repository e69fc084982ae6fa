"""The rack's switched, metered PDU over SNMPv3 (APC PowerNet-MIB, rPDU2 tables): what the
strip and each outlet draw, and an outlet's timed power cycle.

- mib.py: the objects used, by OID (pure);
- snmp.py: one GET or SET with the environment's SNMPv3 credentials (pysnmp);
- strip.py: the strip's reading and an outlet's power cycle, for the inventory's nodes.
"""

from sparkrack.pdu.strip import (
    OutletReading,
    PduError,
    StripReading,
    cycle_outlet,
    read_strip,
)

__all__ = ["OutletReading", "PduError", "StripReading", "cycle_outlet", "read_strip"]
