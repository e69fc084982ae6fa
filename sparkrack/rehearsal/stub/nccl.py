"""A rank's NCCL communicator: its rails to the next rank of the ring, one RDMA write on
each at init and at every collective. A transport environment that does not fit the node,
or a fabric that drops the writes, ends the rank (and so the group) as NCCL does. A port
that goes down under it is warned of at once, as NCCL's async thread does, and its writes
are never acknowledged: the rank fails once the HCA's retries are spent, unless the port
comes back first."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from . import transport
from .log import Log, die


def warn(warning: str) -> None:
    """NCCL's WARN line on stdout, naming the node and the process."""
    pid = os.getpid()
    print(f"{socket.gethostname()}:{pid}:{pid} [0] NCCL WARN {warning}", flush=True)


def info(line: str) -> None:
    """NCCL's INFO line on stdout (NCCL_DEBUG=INFO), in its own form."""
    pid = os.getpid()
    print(f"{socket.gethostname()}:{pid}:{pid} [0] NCCL INFO {line}", flush=True)


PORT_POLL_S = 1.0  # how often the async thread reads its rails' ports (gpusimd's ports)


class Communicator:
    """This rank's side of the group's collectives, over its RoCE rails."""

    def __init__(self, rank: int, nnodes: int, log: Log, endpoints: dict,
                 fault: transport.Fault | None = None, said: list[str] | None = None,
                 ports: Callable[[], dict] | None = None):
        self.rank = rank
        self.nnodes = nnodes
        self.log = log
        self.endpoints = endpoints  # what its peers must reach (transport.endpoints)
        self.fault = fault  # the transport environment's: NCCL fails it after the rendezvous
        self.ring: list[tuple[str, str, str, int]] = []  # its rails to the next rank
        self.said = said or []  # NCCL's INFO lines about its network (transport.info_lines)
        self.ports = ports  # the state of the node's HCA ports now (gpusimd's ports)
        self.down: set[str] = set()  # HCAs of its ring whose port went down since init

    def init(self, peers: dict, stop: threading.Event, mtus: dict | None = None) -> None:
        """The communicator's init, right after the rendezvous, and its first collective
        (peers: {rank: its RoCE addresses}; mtus: {address: its port's active MTU}); a fault
        ends this rank as NCCL would (an advertised address nobody reaches: no error, the
        group waits until stop)."""
        self.ring = self._ring_of(peers, mtus or {})
        for line in self.said:
            info(line)
        if self.ports is not None and self.ring:
            threading.Thread(target=self._watch_ports, name="ib-async", daemon=True).start()
        fault = self.fault or self.writes()
        if fault is None:
            return
        if fault.library == "advertise":  # no error anywhere: the group just never forms
            self.log(f"NCCL version {transport.NCCL_VERSION}+cuda13.0 init done; waiting for "
                     "peers")
            stop.wait()
            die(0, log=self.log)
        warn(fault.warning)
        die(1, f"[rank{self.rank}]: {fault.error}", self.log)

    def _ring_of(self, peers: dict, mtus: dict) -> list[tuple[str, str, str, int]]:
        """(HCA, own address, the next rank's address on that rail, path MTU) per rail: the
        path MTU the smaller of both ends' active MTUs, as NCCL sets the queue pair's
        (net_ib.cc, ncclIbConnect: std::min(remDevInfo->mtu, portAttr.active_mtu))."""
        nnodes = self.nnodes
        theirs = peers.get(str((self.rank + 1) % nnodes), []) if nnodes > 1 else []
        interfaces = transport.local_interfaces()
        ring = []
        for (hca, src), dst in transport.pair_rails(transport.rails(self.endpoints), theirs,
                                                    self.endpoints.get("networks", [])):
            own = transport.ib_mtu(transport.netdev_mtu(src, interfaces) or 1500)
            ring.append((hca, src, dst, min(own, mtus.get(dst, own))))
        return ring

    def _watch_ports(self) -> None:
        """NCCL's async event thread: a port of its rails going down or up is warned of at
        once (net_ib.cc: `Got async error event: port error`, non-fatal)."""
        while True:
            time.sleep(PORT_POLL_S)
            try:
                hcas = self.ports()
            except Exception:  # noqa: BLE001 - gpusimd restarting: the next poll tells
                continue
            for hca in {h for h, *_ in self.ring}:
                down = hcas.get(hca, {}).get("state") != transport.ACTIVE
                if down != (hca in self.down):
                    warn(f"NET/IB : {hca}:1 Got async error event: "
                         f"{'port error' if down else 'port active'}")
                    (self.down.add if down else self.down.discard)(hca)

    def _port_down(self, hca: str) -> bool:
        """Whether hca's port is still down after the HCA's retries (NCCL's retry window,
        RETRY_WINDOW_S): its write is then never acknowledged."""
        end = time.monotonic() + transport.RETRY_WINDOW_S
        while hca in self.down and time.monotonic() < end:
            time.sleep(0.25)
        return hca in self.down

    def writes(self) -> transport.Fault | None:
        """Each rail's RDMA write to the same rail of the next rank, at the path MTU its
        netdev gives (what goes unacknowledged: NCCL's retry-exceeded; from a port that went
        down too)."""
        for hca, src, dst, mtu in self.ring:
            if hca in self.down and self._port_down(hca):
                return transport.write_fault(hca, src, dst, mtu, f"{hca}'s port is down")
            if not transport.first_write(src, dst, mtu + transport.WRITE_OVERHEAD):
                return transport.write_fault(hca, src, dst, mtu)
        return None

    def register(self, hcas: dict, committed_kb: int) -> None:
        """After the load, NCCL registers the buffers of the first collectives (the graph
        capture's) with each HCA it uses: a registration the kernel refuses ends the rank."""
        names = [hca for hca, _ in transport.rails(self.endpoints)]
        fault = transport.registration_fault(names, hcas, committed_kb)
        if fault is not None:
            warn(fault.warning)
            die(1, f"[rank{self.rank}]: {fault.error}", self.log)

    def step(self) -> None:
        """A collective's writes; a fabric that drops them ends the rank (and the group) as
        NCCL does once the HCA's retries are spent."""
        fault = self.writes()
        if fault is not None:
            warn(fault.warning)
            die(1, f"[rank{self.rank}]: {fault.error}", self.log)
