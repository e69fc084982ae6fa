"""The rack's metered (and usually switched) PDU over SNMPv3: what the strip and each outlet
draw, and an outlet's timed power cycle, in the objects of the inventory's `pdu.model`.

- rpdu2.py, sentry4.py: each MIB's objects, by OID (pure);
- families.py: one Family per model: what a reading asks and means, the cycle's SETs (pure);
- snmp.py: one GET or SET with the environment's SNMPv3 credentials (pysnmp);
- nodeoutlets.py: the strip's reading and an outlet's power cycle, for the inventory's nodes.
"""

from sparkrack.pdu.nodeoutlets import (
    OutletReading,
    PduError,
    StripReading,
    cycle_outlet,
    read_strip,
)

__all__ = ["OutletReading", "PduError", "StripReading", "cycle_outlet", "read_strip"]
