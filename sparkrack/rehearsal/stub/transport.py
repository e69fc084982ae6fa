"""A rank's transport environment judged as Gloo and NCCL would judge it on the node.

A real rank fails at group init when its environment does not fit the node's hardware;
the stub does the same, from what the node shows (its HCAs through gpusimd, its netdevs
seen directly: the container shares the node's network namespace):

- `GLOO_SOCKET_IFNAME` names an interface that does not exist or has no IPv4 address on
  the rendezvous network: Gloo's "Unable to find address for" (at init_process_group);
- `NCCL_SOCKET_IFNAME` matches no interface with such an address: "Bootstrap : no socket
  interface found";
- an `NCCL_IB_HCA` entry matches no HCA, or its port is not ACTIVE (unless
  `NCCL_IB_DISABLE=1`);
- `NCCL_IB_GID_INDEX` is not, on every HCA NCCL uses, the RoCE v2 entry whose GID is
  IPv4-mapped: the queue pairs never connect (IBV_WC_RETRY_EXC_ERR), or the entry is empty
  (ibv_modify_qp fails);
- the fabric drops the RDMA writes of the first collective (a switch port at a smaller
  MTU than the RoCE path MTU the nodes' MTU gives): IBV_WC_RETRY_EXC_ERR. The stub sends,
  on each HCA's address, one datagram of an RDMA write's packet size at that path MTU to
  its ring neighbour's same rail (UDP 4791, RoCE v2's port), which echoes it.

Unset variables leave the choice to the libraries, as they do: every HCA, NCCL's own GID
selection, the interface of the host name. Pure except `local_interfaces`, `netdev_mtu`,
`echo_rails` and `first_write`.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from .group import NCCL_VERSION

ROCE_V2 = "RoCE v2"
ACTIVE = "4: ACTIVE"
_SIOCGIFADDR, _SIOCGIFNETMASK, _SIOCGIFMTU = 0x8915, 0x891B, 0x8921
ROCE_PORT = 4791  # RoCE v2's UDP port
IB_HEADERS = 96  # what the kernel takes off a netdev's MTU for IB headers (iboe_get_mtu)
WRITE_OVERHEAD = 60  # IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 around an RDMA write
_IB_MTUS = (4096, 2048, 1024, 512, 256)
_IP_MTU_DISCOVER, _IP_PMTUDISC_DO = 10, 2


@dataclass(frozen=True)
class Fault:
    """What breaks group init: which library, when, and the lines it prints."""

    library: str  # gloo | nccl
    warning: str  # the NCCL WARN / Gloo enforce text
    error: str  # the exception line torch raises


HOST_IP = {"sglang": "SGLANG_HOST_IP", "vllm": "VLLM_HOST_IP"}


def advertised_fault(engine: str, env: Mapping[str, str], interfaces: Mapping[str, list[str]],
                     default: str) -> Fault | None:
    """A rank advertises one address to its peers for its cross-node channels: the
    engine's *_HOST_IP, else the default route's (on a Spark: the management network's;
    default: this node's management address). When that address is on none of the
    networks of the interfaces NCCL_SOCKET_IFNAME names, the peers' connections never
    arrive: the group hangs after NCCL init (the public multi-Spark reports), no error."""
    name = HOST_IP.get(engine, "")
    address = env.get(name) or default
    value = env.get("NCCL_SOCKET_IFNAME")
    if not value or not address:
        return None
    exclude, exact, entries = _nccl_list(value)
    networks = [a for iface, addresses in interfaces.items()
                if any(_matches(e, iface, exact) for e in entries) != exclude for a in addresses]
    if _on_network(networks, address):
        return None
    source = f"{name}={address}" if env.get(name) else f"{name} unset: {address}, the default route's"
    return Fault("advertise", f"this rank advertises {address} ({source}), which no "
                 f"interface of NCCL_SOCKET_IFNAME={value} reaches: its peers wait for it",
                 "")


def local_interfaces() -> dict[str, list[str]]:
    """{interface: ["10.77.1.15/24", ...]} of this network namespace (IPv4 only)."""
    found: dict[str, list[str]] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFNETMASK, request)[20:24])
            except OSError:
                found[name] = []
                continue
            prefix = ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen
            found[name] = [f"{address}/{prefix}"]
    return found


def check(env: Mapping[str, str], hcas: Mapping[str, dict],
          interfaces: Mapping[str, list[str]], rendezvous: str) -> Fault | None:
    """The first fault of env on this node (Gloo's first, as init_process_group comes
    first), or None. hcas: gpusim_rdma.read_rdma output; rendezvous: rank 0's address."""
    return (_gloo(env, interfaces, rendezvous) or _nccl_socket(env, interfaces, rendezvous)
            or _nccl_ib(env, hcas))


def _on_network(addresses: list[str], rendezvous: str) -> bool:
    """Whether one of addresses (with prefix) is on the rendezvous address's network."""
    try:
        target = ipaddress.IPv4Address(rendezvous)
    except ValueError:  # a host name: any IPv4 address will do
        return bool(addresses)
    return any(target in ipaddress.IPv4Interface(a).network for a in addresses)


def _gloo(env, interfaces, rendezvous) -> Fault | None:
    names = env.get("GLOO_SOCKET_IFNAME")
    if not names:
        return None
    for name in names.split(","):
        if not _on_network(interfaces.get(name, []), rendezvous):
            text = (f"[enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:83]"
                    f" ifa != nullptr. Unable to find address for: {name}")
            return Fault("gloo", text, f"RuntimeError: {text}")
    return None


def _nccl_list(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL's device list syntax: (exclude '^', exact '=', names without ':port')."""
    exclude = value.startswith("^")
    value = value.lstrip("^")
    exact = value.startswith("=")
    return exclude, exact, [e.split(":")[0] for e in value.lstrip("=").split(",") if e]


def _matches(entry: str, name: str, exact: bool) -> bool:
    return name == entry if exact else name.startswith(entry)


def _nccl_socket(env, interfaces, rendezvous) -> Fault | None:
    value = env.get("NCCL_SOCKET_IFNAME")
    if not value:
        return None
    exclude, exact, entries = _nccl_list(value)
    usable = [name for name, addresses in interfaces.items()
              if any(_matches(e, name, exact) for e in entries) != exclude
              and _on_network(addresses, rendezvous)]
    if usable:
        return None
    return Fault("nccl", "Bootstrap : no socket interface found",
                 _nccl_error("internal error - please report this issue to the NCCL developers",
                             "ncclInternalError: Internal check failed.",
                             "Bootstrap : no socket interface found"))


def _nccl_ib(env, hcas) -> Fault | None:
    if env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        return None
    used = dict(hcas)
    value = env.get("NCCL_IB_HCA")
    if value:
        exclude, exact, entries = _nccl_list(value)
        if exclude:
            used = {n: h for n, h in hcas.items() if not any(_matches(e, n, exact) for e in entries)}
        else:
            for entry in entries:
                if not any(_matches(entry, name, exact) for name in hcas):
                    found = ", ".join(sorted(hcas)) or "none"
                    return _system_fault(f"NET/IB : NCCL_IB_HCA entry {entry} matches no "
                                         f"device (the node has: {found})")
            used = {n: h for n, h in hcas.items() if any(_matches(e, n, exact) for e in entries)}
    for name, hca in sorted(used.items()):
        if hca.get("state") != ACTIVE:
            return _system_fault(f"NET/IB : {name}:1 port is not active "
                                 f"(state {hca.get('state') or 'unknown'})")
    return _gid(env.get("NCCL_IB_GID_INDEX"), used)


def _gid(value: str | None, used: Mapping[str, dict]) -> Fault | None:
    if value is None or value == "":
        return None
    try:
        index = int(value)
    except ValueError:
        return _system_fault(f"NCCL_IB_GID_INDEX={value} is not an integer")
    for name, hca in sorted(used.items()):
        gid = hca.get("gids", {}).get(str(index))
        kind = hca.get("types", {}).get(str(index), "")
        if gid is None:
            return _system_fault(f"Call to ibv_modify_qp failed with 22 Invalid argument, "
                                 f"{name}:1 GID index {index} is empty")
        if kind != ROCE_V2 or not _ipv4_mapped(gid):
            text = (f"NET/IB : Got completion from peer with status=IBV_WC_RETRY_EXC_ERR(12) "
                    f"opcode=IBV_WC_SEND(0) vendor_err=129 dev={name} localGidIndex={index} "
                    f"localGid {gid} ({kind or 'no type'}; NCCL_IB_GID_INDEX={index})")
            return Fault("nccl", text, _nccl_error(
                "remote process exited or there was a network error", "ncclRemoteError: A "
                "call failed possibly due to a network error or a remote process exiting "
                "prematurely.", text))
    return None


def ib_mtu(netdev_mtu: int) -> int:
    """The RoCE path MTU the kernel gives an HCA whose netdev has netdev_mtu (9000: 4096;
    1500: 1024)."""
    return next((m for m in _IB_MTUS if m <= netdev_mtu - IB_HEADERS), 256)


def rails(env: Mapping[str, str], hcas: Mapping[str, dict]) -> list[tuple[str, str]]:
    """(HCA, IPv4) of each HCA NCCL uses, in name order, from the GID it uses (the one at
    NCCL_IB_GID_INDEX, else the RoCE v2 IPv4-mapped entry); none with NCCL_IB_DISABLE."""
    if env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        return []
    used = dict(hcas)
    if env.get("NCCL_IB_HCA"):
        exclude, exact, entries = _nccl_list(env["NCCL_IB_HCA"])
        used = {n: h for n, h in hcas.items()
                if any(_matches(e, n, exact) for e in entries) != exclude}
    found = []
    for name, hca in sorted(used.items()):
        index = env.get("NCCL_IB_GID_INDEX") or next(
            (i for i, gid in sorted(hca.get("gids", {}).items())
             if hca.get("types", {}).get(i) == ROCE_V2 and _ipv4_mapped(gid)), None)
        gid = hca.get("gids", {}).get(str(index), "")
        if _ipv4_mapped(gid):
            found.append((name, str(ipaddress.IPv6Address(gid).ipv4_mapped)))
    return found


def write_fault(hca: str, src: str, dst: str, mtu: int) -> Fault:
    """The first collective's RDMA write to dst never acknowledged: NCCL's retry-exceeded."""
    text = (f"NET/IB : Got completion from peer {dst}<{ROCE_PORT}> with status="
            f"IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129 dev={hca} "
            f"localGid ::ffff:{src} remoteGid ::ffff:{dst} (path MTU {mtu}: its packets do "
            "not cross the fabric)")
    return Fault("nccl", text, _nccl_error(
        "remote process exited or there was a network error", "ncclRemoteError: A call "
        "failed possibly due to a network error or a remote process exiting prematurely.",
        text))


def netdev_mtu(address: str, interfaces: Mapping[str, list[str]]) -> int | None:
    """The MTU of the interface that holds address (None: none does)."""
    name = next((n for n, found in interfaces.items()
                 if any(a.split("/")[0] == address for a in found)), None)
    if name is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sI", name.encode()[:15], 0)
        return struct.unpack("16sI", fcntl.ioctl(sock.fileno(), _SIOCGIFMTU, request))[1]


def echo_rails(addresses: list[str]) -> None:
    """Echo every datagram to ROCE_PORT on addresses, for the process's life (the peers'
    first writes). An address already taken is left out: its peer's write then fails."""
    for address in addresses:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((address, ROCE_PORT))
        except OSError:
            sock.close()
            continue
        threading.Thread(target=_echo, args=(sock,), daemon=True,
                         name=f"roce-echo-{address}").start()


def _echo(sock: socket.socket) -> None:
    while True:
        try:
            data, peer = sock.recvfrom(65536)
            sock.sendto(data, peer)
        except OSError:
            continue


def first_write(src: str, dst: str, size: int, seconds: float = 3.0) -> bool:
    """Whether a size-byte datagram from src (don't fragment) came back from dst's echo
    within seconds, sent again every 0.25 s (as the HCA retries an unacknowledged write)."""
    payload = b"w" * (size - 28)  # an IPv4 packet of size bytes
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
        sock.bind((src, 0))
        sock.settimeout(0.25)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                sock.sendto(payload, (dst, ROCE_PORT))
                if sock.recvfrom(65536)[0] == payload:
                    return True
            except OSError:
                continue
    return False


def _ipv4_mapped(gid: str) -> bool:
    try:
        return ipaddress.IPv6Address(gid).ipv4_mapped is not None
    except ValueError:
        return False


def _system_fault(text: str) -> Fault:
    return Fault("nccl", text, _nccl_error(
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.", text))


def _nccl_error(what: str, kind: str, last: str) -> str:
    return (f"torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            f"c10d/ProcessGroupNCCL.cpp:3356, {what}, NCCL version {NCCL_VERSION}\n{kind}\n"
            f"Last error:\n{last}")
