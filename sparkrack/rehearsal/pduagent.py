"""The rehearsal PDU's SNMP agent: a real SNMPv3 agent (pysnmp) answering APC's
PowerNet-MIB rPDU2 objects that sparkrack uses (sparkrack/pdu/mib.py) for an `Outlets`
backend, so that `snmpget`/`snmpset` (net-snmp) and sparkrack talk to it as to a rack PDU.

SNMPv3 only, one user, authPriv (HMAC-SHA-96, AES-128): it reads everything under
1.3.6.1 and writes only the outlet configuration and control tables. A command switches
the outlet in a worker thread (booting a node takes seconds) while the agent keeps
answering; the outlet reads `commandPending` until it is done. Run by
`invoke rehearsal.up` as `python -m sparkrack.rehearsal.pduagent` (rehearsal/pdu.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from sparkrack.pdu import mib

VOLTS = 120  # the field report's strip: 1,440 W is 12 A at 120 V
READ_TREE = (1, 3, 6, 1)
WRITE_TREES = (mib.RPDU2 + (9, 2, 1), mib.RPDU2 + (9, 2, 4))
COMMANDS = (mib.IMMEDIATE_ON, mib.IMMEDIATE_OFF, mib.IMMEDIATE_REBOOT,
            5, 6, 7, 8)  # delayedOn/Off/Reboot run at once here (no delay configured); 8 cancels


class Outlets(Protocol):
    """What the agent switches and meters."""

    name: str
    count: int

    def label(self, outlet: int) -> str: ...
    def is_on(self, outlet: int) -> bool: ...
    def watts(self, outlet: int) -> int: ...
    def switch(self, outlet: int, on: bool) -> None: ...


class Pdu:
    """The outlets' switching state around a backend: pending commands, reboot durations."""

    def __init__(self, outlets: Outlets, log=print):
        self.outlets = outlets
        self.log = log
        self.reboot_s = {n: mib.REBOOT_DURATION_S[0] for n in self.numbers}
        self.pending: dict[int, threading.Event] = {}  # outlet: cancel event
        self.workers = ThreadPoolExecutor(max_workers=max(1, outlets.count),
                                          thread_name_prefix="outlet")

    @property
    def numbers(self) -> range:
        return range(1, self.outlets.count + 1)

    def total_hundredths_kw(self) -> int:
        """rPDU2DeviceStatusPower: the whole load in hundredths of kW."""
        return round(sum(self.outlets.watts(n) for n in self.numbers) / 10)

    def command(self, outlet: int, value: int) -> None:
        """Carry out an rPDU2OutletSwitchedControlCommand."""
        if value == 8:
            if outlet in self.pending:
                self.pending[outlet].set()
            return
        if outlet in self.pending:
            return  # one command at a time per outlet, as the PDU queues none
        cancel = threading.Event()
        self.pending[outlet] = cancel
        self.workers.submit(self._run, outlet, value, cancel)

    def _run(self, outlet: int, value: int, cancel: threading.Event) -> None:
        try:
            if value in (mib.IMMEDIATE_OFF, 6, mib.IMMEDIATE_REBOOT, 7):
                self.log(f"outlet {outlet} ({self.outlets.label(outlet)}): off")
                self.outlets.switch(outlet, False)
            if value in (mib.IMMEDIATE_REBOOT, 7) and cancel.wait(self.reboot_s[outlet]):
                return  # cancelled: the outlet stays off
            if value in (mib.IMMEDIATE_ON, 5, mib.IMMEDIATE_REBOOT, 7):
                self.log(f"outlet {outlet} ({self.outlets.label(outlet)}): on")
                self.outlets.switch(outlet, True)
        except Exception as error:  # noqa: BLE001 - the agent must keep answering
            self.log(f"outlet {outlet}: {error}")
        finally:
            self.pending.pop(outlet, None)


def build_engine(pdu: Pdu, address: str, port: int, user: str, auth_key: str, priv_key: str):
    """The SNMP engine serving pdu's objects at address:port, not yet dispatching."""
    from pysnmp.carrier.asyncio.dgram import udp
    from pysnmp.entity import config, engine
    from pysnmp.entity.rfc3413 import cmdrsp, context

    snmp = engine.SnmpEngine()
    config.add_transport(snmp, udp.DOMAIN_NAME,
                         udp.UdpTransport().open_server_mode((address, port)))
    config.add_v3_user(snmp, user, config.USM_AUTH_HMAC96_SHA, auth_key,
                       config.USM_PRIV_CFB128_AES, priv_key)
    config.add_vacm_user(snmp, 3, user, "authPriv", READ_TREE, WRITE_TREES[0])
    config.add_vacm_user(snmp, 3, user, "authPriv", READ_TREE, WRITE_TREES[1])
    snmp_context = context.SnmpContext(snmp)
    _export(snmp_context.get_mib_instrum().get_mib_builder(), pdu)
    for responder in (cmdrsp.GetCommandResponder, cmdrsp.NextCommandResponder,
                      cmdrsp.BulkCommandResponder, cmdrsp.SetCommandResponder):
        responder(snmp, snmp_context)
    return snmp


def _export(builder, pdu: Pdu) -> None:
    """The rPDU2 columns and one instance per row, each read live from pdu."""
    from pysnmp.proto.api import v2c
    from pysnmp.smi import error

    MibScalar, MibScalarInstance = builder.import_symbols(
        "SNMPv2-SMI", "MibScalar", "MibScalarInstance")

    class Live(MibScalarInstance):
        """An instance whose value is read (and, if writable, written) through functions."""

        def __init__(self, column, index, syntax, read, write=None, allowed=None):
            super().__init__(column, (index,), syntax)
            self.read, self.write, self.allowed = read, write, allowed

        def getValue(self, name, **context):  # noqa: N802 - pysnmp's name
            return self.getSyntax().clone(self.read())

        def setValue(self, value, name, **context):  # noqa: N802 - pysnmp's name
            if value is not None and self.allowed is not None and int(value) not in self.allowed:
                raise error.WrongValueError(name=name, idx=context.get("idx"))
            return super().setValue(value, name, **context)

        def writeCommit(self, varBind, **context):  # noqa: N802 - pysnmp's name
            self.write(int(varBind[1]))

    outlets = pdu.outlets
    integer, text = v2c.Integer32, v2c.OctetString
    columns = [  # (column, syntax, access, read(n), write(n, value), allowed)
        (mib.IDENT_NAME, text, "read-only", lambda n: outlets.name, None, None),
        (mib.DEVICE_PROPERTIES_NUM_OUTLETS, integer, "read-only", lambda n: outlets.count,
         None, None),
        (mib.DEVICE_STATUS_POWER, integer, "read-only", lambda n: pdu.total_hundredths_kw(),
         None, None)]
    device = [(column, syntax, access, read, write, allowed, (1,))
              for column, syntax, access, read, write, allowed in columns]
    rows = [
        (mib.OUTLET_CONFIG_NAME, text, "read-only", outlets.label, None, None),
        (mib.OUTLET_REBOOT_DURATION, integer, "read-write", pdu.reboot_s.__getitem__,
         pdu.reboot_s.__setitem__, range(mib.REBOOT_DURATION_S[0], mib.REBOOT_DURATION_S[1] + 1)),
        (mib.OUTLET_STATE, integer, "read-only",
         lambda n: mib.STATE_ON if outlets.is_on(n) else mib.STATE_OFF, None, None),
        (mib.OUTLET_COMMAND_PENDING, integer, "read-only",
         lambda n: mib.COMMAND_PENDING if n in pdu.pending else mib.NO_COMMAND_PENDING,
         None, None),
        (mib.OUTLET_COMMAND, integer, "read-write",
         lambda n: mib.IMMEDIATE_ON if outlets.is_on(n) else mib.IMMEDIATE_OFF, pdu.command,
         COMMANDS),
        (mib.OUTLET_CURRENT, integer, "read-only",
         lambda n: round(outlets.watts(n) * 10 / VOLTS), None, None),
        (mib.OUTLET_POWER, integer, "read-only", outlets.watts, None, None)]
    table = [(*row, tuple(pdu.numbers)) for row in rows]
    symbols = []
    for column, syntax, access, read, write, allowed, indices in device + table:
        symbols.append(MibScalar(column, syntax()).setMaxAccess(access))
        for index in indices:
            initial = syntax("") if syntax is text else syntax(0)  # a value: readTest wants one
            symbols.append(Live(column, index, initial, lambda r=read, i=index: r(i),
                                None if write is None else lambda v, w=write, i=index: w(i, v),
                                allowed))
    builder.export_symbols("__REHEARSAL-PDU", *symbols)


async def serve(pdu: Pdu, address: str, port: int, environ) -> None:
    """Answer until SIGTERM or SIGINT."""
    snmp = build_engine(pdu, address, port, environ["PDU_USER"], environ["PDU_AUTH_KEY"],
                        environ["PDU_PRIV_KEY"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    snmp.transport_dispatcher.job_started(1)
    snmp.open_dispatcher()
    pdu.log(f"PDU {pdu.outlets.name}: {pdu.outlets.count} outlets, SNMPv3 at {address}:{port}")
    await stop.wait()
    snmp.transport_dispatcher.job_finished(1)
    snmp.close_dispatcher()
    pdu.workers.shutdown(wait=True, cancel_futures=True)


def main(argv: list[str]) -> int:
    """The agent process: the rack's outlets (rehearsal/pdu.py) at address:port; the
    SNMPv3 user and keys in PDU_USER, PDU_AUTH_KEY, PDU_PRIV_KEY."""
    parser = argparse.ArgumentParser(prog="pduagent", description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    from sparkrack.rehearsal.pdu import RackOutlets

    def log(line: str) -> None:
        print(line, flush=True)

    asyncio.run(serve(Pdu(RackOutlets(args.inventory, log), log), args.address, args.port,
                      os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
