"""What a rank's NCCL says it uses, read from its INFO lines at init (NCCL_DEBUG=INFO,
NCCL_DEBUG_SUBSYS=INIT,NET: nccl.env sets them): the network (IB or Socket), the HCAs and
ports, GPUDirect RDMA per HCA. The lines are NCCL 2.27.7's (net_ib.cc, net_socket.cc,
init.cc, graph/topo.cc); docs/engines.md#what-nccl-uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# An unacknowledged RDMA write is retried NCCL_IB_RETRY_CNT times, each after 4.096 us *
# 2^NCCL_IB_TIMEOUT (NCCL's defaults: 7 and 20; net_ib.cc): then IBV_WC_RETRY_EXC_ERR. A
# port that goes down under a communicator fails its rail after this window (about 34 s).
IB_TIMEOUT, IB_RETRY_CNT = 20, 7
RETRY_WINDOW_S = 4.096e-6 * 2 ** IB_TIMEOUT * (1 + IB_RETRY_CNT)

_INFO = re.compile(r"\bNCCL INFO (.*)$")
_IB_USING = re.compile(r"^NET/IB : Using(.*?)(?: \[RO\])? ?; OOB (\S+)")
_IB_DEVICE = re.compile(r"\[\d+\](\S+?):(\d+)/(\w+)")
_SOCKET_USING = re.compile(r"^NET/Socket : Using(.*)$")
_SOCKET_DEVICE = re.compile(r"\[\d+\](\S+?):(\S+?)<\d+>")
_NETWORK = re.compile(r"^Using network (\w+)")
_GDR = re.compile(r"^NET/\w+ : GPU Direct RDMA (Enabled|Disabled) for HCA \d+ '([^']+)'")


@dataclass(frozen=True)
class NcclUse:
    """A rank's network as its NCCL said it at init (network None: it said nothing)."""

    network: str | None = None  # IB | Socket
    hcas: tuple[str, ...] = ()  # "rocep1s0f0:1" for each device:port NET/IB uses
    sockets: tuple[str, ...] = ()  # "enp1s0f0np0 10.77.3.13" for NET/Socket's interfaces
    gdr: dict[str, bool] = field(default_factory=dict)  # HCA -> GPUDirect RDMA on

    @property
    def said(self) -> bool:
        return self.network is not None

    def text(self) -> str:
        """'NET/IB on rocep1s0f0:1, roceP2p1s0f0:1' or 'NET/Socket (TCP) on enp1s0f0np0'."""
        if self.network == "IB":
            return f"NET/IB on {', '.join(self.hcas) or 'no HCA'}"
        if self.network == "Socket":
            names = ", ".join(s.split()[0] for s in self.sockets) or "its socket interface"
            return f"NET/Socket (TCP) on {names}"
        return "nothing said of its network"


def nccl_use(lines: Iterable[str]) -> NcclUse:
    """The last init's NcclUse from a rank's log lines (a restart prints them again)."""
    network, hcas, sockets, gdr = None, (), (), {}
    for line in lines:
        found = _INFO.search(line)
        if found is None:
            continue
        text = found.group(1).strip()
        if match := _IB_USING.match(text):
            hcas = tuple(f"{name}:{port}" for name, port, _ in _IB_DEVICE.findall(match.group(1)))
            gdr = {}
        elif match := _SOCKET_USING.match(text):
            sockets = tuple(f"{name} {address}"
                            for name, address in _SOCKET_DEVICE.findall(match.group(1)))
        elif match := _NETWORK.match(text):
            network = match.group(1)
        elif match := _GDR.match(text):
            gdr[match.group(2)] = match.group(1) == "Enabled"
    if network == "Socket":
        hcas = ()
    return NcclUse(network, hcas, sockets, gdr)
