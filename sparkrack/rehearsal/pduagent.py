"""The rehearsal PDU's SNMP agent: a real SNMPv3 agent (pysnmp) answering, for an `Outlets`
backend, the objects of the inventory's `pdu.model` that sparkrack uses (pdumib.py: APC's
PowerNet-MIB rPDU2, or Server Technology's Sentry4-MIB, switched or metered only), so that
`snmpget`/`snmpset` (net-snmp) and sparkrack talk to it as to that rack PDU.

SNMPv3 only, one user, authPriv (HMAC-SHA-96, AES-128): it reads everything under
1.3.6.1 and writes only the model's configuration and control objects (none for a metered
one). A command switches the outlet in a worker thread (booting a node takes seconds) while
the agent keeps answering; the outlet reads its command under way until it is done. Run by
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

from sparkrack.inventory.pdu import DEFAULT_MODEL
from sparkrack.rehearsal import pdumib

READ_TREE = (1, 3, 6, 1)
FIRST_REBOOT_S = 5  # an outlet's reboot duration until one is set


class Outlets(Protocol):
    """What the agent switches and meters."""

    name: str
    count: int

    def label(self, outlet: int) -> str: ...
    def is_on(self, outlet: int) -> bool: ...
    def watts(self, outlet: int) -> int: ...
    def switch(self, outlet: int, on: bool) -> None: ...


class Pdu:
    """The outlets' switching state around a backend, for one model: pending commands,
    reboot durations."""

    def __init__(self, outlets: Outlets, log=print, model: str = DEFAULT_MODEL):
        self.outlets = outlets
        self.log = log
        self.model = model
        self.reboot_s = dict.fromkeys(self.numbers, FIRST_REBOOT_S)
        self.pending: dict[int, threading.Event] = {}  # outlet: cancel event
        self.workers = ThreadPoolExecutor(max_workers=max(1, outlets.count),
                                          thread_name_prefix="outlet")

    @property
    def numbers(self) -> range:
        return range(1, self.outlets.count + 1)

    def total_watts(self) -> int:
        """The whole load: every outlet's draw."""
        return sum(self.outlets.watts(n) for n in self.numbers)

    def command(self, outlet: int, steps: tuple[bool, bool, bool] | None,
                cancel: bool = False) -> None:
        """Carry out a command: steps (switch off, wait the reboot duration, switch on), or
        cancel the outlet's pending one."""
        if cancel:
            if outlet in self.pending:
                self.pending[outlet].set()
            return
        if steps is None or not any(steps) or outlet in self.pending:
            return  # one command at a time per outlet, as the PDU queues none
        stop = threading.Event()
        self.pending[outlet] = stop
        self.workers.submit(self._run, outlet, steps, stop)

    def _run(self, outlet: int, steps: tuple[bool, bool, bool], stop: threading.Event) -> None:
        off, wait, on = steps
        try:
            if off:
                self.log(f"outlet {outlet} ({self.outlets.label(outlet)}): off")
                self.outlets.switch(outlet, False)
            if wait and stop.wait(self.reboot_s[outlet]):
                return  # cancelled: the outlet stays off
            if on:
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

    rows, writable = pdumib.rows(pdu)
    snmp = engine.SnmpEngine()
    config.add_transport(snmp, udp.DOMAIN_NAME,
                         udp.UdpTransport().open_server_mode((address, port)))
    config.add_v3_user(snmp, user, config.USM_AUTH_HMAC96_SHA, auth_key,
                       config.USM_PRIV_CFB128_AES, priv_key)
    for tree in writable or ((),):
        config.add_vacm_user(snmp, 3, user, "authPriv", READ_TREE, tree)
    snmp_context = context.SnmpContext(snmp)
    _export(snmp_context.get_mib_instrum().get_mib_builder(), rows)
    for responder in (cmdrsp.GetCommandResponder, cmdrsp.NextCommandResponder,
                      cmdrsp.BulkCommandResponder, cmdrsp.SetCommandResponder):
        responder(snmp, snmp_context)
    return snmp


def _export(builder, rows: list[pdumib.Row]) -> None:
    """Each row's column and its instances, each read live."""
    from pysnmp.proto.api import v2c
    from pysnmp.smi import error

    MibScalar, MibScalarInstance = builder.import_symbols(
        "SNMPv2-SMI", "MibScalar", "MibScalarInstance")

    class Live(MibScalarInstance):
        """An instance whose value is read (and, if writable, written) through functions."""

        def __init__(self, column, index, syntax, read, write=None, allowed=None):
            super().__init__(column, index, syntax)
            self.read, self.write, self.allowed = read, write, allowed

        def getValue(self, name, **context):  # noqa: N802 - pysnmp's name
            return self.getSyntax().clone(self.read())

        def setValue(self, value, name, **context):  # noqa: N802 - pysnmp's name
            if value is not None and self.allowed is not None and int(value) not in self.allowed:
                raise error.WrongValueError(name=name, idx=context.get("idx"))
            return super().setValue(value, name, **context)

        def writeCommit(self, varBind, **context):  # noqa: N802 - pysnmp's name
            self.write(int(varBind[1]))

    kinds = {"integer": (v2c.Integer32, 0), "text": (v2c.OctetString, ""),
             "bits": (v2c.Bits, b"")}
    symbols = []
    for row in rows:
        syntax, initial = kinds[row.kind]
        symbols.append(MibScalar(row.column, syntax()).setMaxAccess(row.access))
        for index, outlet in row.instances:
            symbols.append(Live(row.column, index, syntax(initial),  # readTest wants a value
                                lambda r=row.read, n=outlet: r(n),
                                None if row.write is None else
                                lambda v, w=row.write, n=outlet: w(n, v), row.allowed))
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
    pdu.log(f"PDU {pdu.outlets.name} ({pdu.model}): {pdu.outlets.count} outlets, SNMPv3 at "
            f"{address}:{port}")
    await stop.wait()
    snmp.transport_dispatcher.job_finished(1)
    snmp.close_dispatcher()
    pdu.workers.shutdown(wait=True, cancel_futures=True)


def main(argv: list[str]) -> int:
    """The agent process: the rack's outlets (rehearsal/pduoutlets.py) at address:port; the
    SNMPv3 user and keys in PDU_USER, PDU_AUTH_KEY, PDU_PRIV_KEY."""
    parser = argparse.ArgumentParser(prog="pduagent", description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    from sparkrack.rehearsal.pduoutlets import RackOutlets

    def log(line: str) -> None:
        print(line, flush=True)

    outlets = RackOutlets(args.inventory, log)
    asyncio.run(serve(Pdu(outlets, log, outlets.model), args.address, args.port, os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
