"""A rank's transport environment judged as Gloo and NCCL would judge it on the node: what
the node shows (its HCAs through gpusimd, its netdevs directly) against the variables, each
failure in the libraries' own words (docs/rehearsal.md, "NCCL and Gloo at group init").
Pure except `local_interfaces`, `local_ipv6`, `netdev_mtu` and `first_write`; the writes
are answered by the peer node's HCAs (gpusimd: sim/gpusim/hca.py), not by the peer's process.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import socket
import struct
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


class _Sockaddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_ushort),
                ("addr", ctypes.c_ubyte * 4)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p),
                     ("flags", ctypes.c_uint), ("addr", ctypes.POINTER(_Sockaddr)),
                     ("netmask", ctypes.POINTER(_Sockaddr))]


def local_interfaces() -> dict[str, list[str]]:
    """{interface: ["10.77.1.15/24", ...]} of this network namespace: every IPv4 address, in
    getifaddrs(3)'s order, as Gloo and NCCL walk them (interfaces without one: [])."""
    found: dict[str, list[str]] = {name: [] for _, name in socket.if_nameindex()}
    libc = ctypes.CDLL(None, use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return found
    try:
        entry = head
        while entry:
            item = entry.contents
            if item.addr and item.addr.contents.family == socket.AF_INET:
                address = socket.inet_ntoa(bytes(item.addr.contents.addr))
                mask = socket.inet_ntoa(bytes(item.netmask.contents.addr)) if item.netmask \
                    else "255.255.255.255"
                prefix = ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen
                found.setdefault(item.name.decode(), []).append(f"{address}/{prefix}")
            entry = item.next
    finally:
        libc.freeifaddrs(head)
    return found


def local_ipv6(path: str = "/proc/net/if_inet6") -> dict[str, list[str]]:
    """{interface: ["fe80::...", ...]} of this network namespace, from /proc/net/if_inet6."""
    found: dict[str, list[str]] = {}
    try:
        with open(path, encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for line in lines:
        words = line.split()
        if len(words) == 6 and len(words[0]) == 32:
            address = str(ipaddress.IPv6Address(bytes.fromhex(words[0])))
            found.setdefault(words[5], []).append(address)
    return found


def gloo_address(name: str, interfaces: Mapping[str, list[str]],
                 ipv6: Mapping[str, list[str]]) -> str | None:
    """The address Gloo takes on interface name (tcp/device.cc, lookupAddrForIface with
    AF_UNSPEC): the first AF_INET or AF_INET6 one getifaddrs lists, IPv4 before IPv6; an
    interface that lost its IPv4 address gives its IPv6 link-local one."""
    if interfaces.get(name):
        return interfaces[name][0].split("/")[0]
    return next(iter(ipv6.get(name, [])), None)


def endpoints(env: Mapping[str, str], hcas: Mapping[str, dict],
              interfaces: Mapping[str, list[str]],
              ipv6: Mapping[str, list[str]] | None = None) -> dict:
    """What a rank tells its peers at the rendezvous: the addresses they must reach (its
    Gloo address: GLOO_SOCKET_IFNAME's first, gloo_address; the IPv4 address of the GID
    each HCA NCCL uses: the entry NCCL_IB_GID_INDEX names, unset: the first RoCE v2 IPv4
    one, as NCCL keeps the first of equal candidates) and the networks it reaches (every
    address but loopback's: a peer connecting to 127.0.0.1 reaches itself)."""
    used: list[list[str]] = []
    name = (env.get("GLOO_SOCKET_IFNAME") or "").split(",")[0]
    address = gloo_address(name, interfaces, ipv6 or {}) if name else None
    if address:
        used.append(["gloo", address])
    for hca_name, hca in sorted(_used_hcas(env, hcas).items()):  # none: NET/Socket
        address = _gid_address(env.get("NCCL_IB_GID_INDEX"), hca)
        if address:
            used.append([hca_name, address])
    return {"used": used, "networks": [a for addresses in interfaces.values() for a in addresses
                                       if not ipaddress.IPv4Interface(a).is_loopback]}


def unreachable(ranks: Mapping[int, dict]) -> Fault | None:
    """The first address a rank uses that a peer has no network for (Gloo's connections,
    NCCL's queue pairs to it never arrive), judged on what every rank sent."""
    for rank, mine in sorted(ranks.items()):  # a link-local IPv6 address: no error, a hang
        address = next((a for via, a in mine.get("used", []) if via == "gloo" and ":" in a), None)
        if address is not None:
            text = (f"[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] Gloo "
                    f"connectFullMesh failed: timed out connecting to rank {rank} at "
                    f"[{address}] (GLOO_SOCKET_IFNAME's only address is IPv6 link-local: "
                    "its IPv4 address is gone)")
            return Fault("gloo-hang", text, f"RuntimeError: {text}")
    for rank, mine in sorted(ranks.items()):
        for via, address in mine.get("used", []):
            peer = next((p for p, theirs in sorted(ranks.items())
                         if p != rank and not _on_network(theirs.get("networks", []), address)),
                        None)
            if peer is None:
                continue
            if via == "gloo":
                text = (f"[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] Gloo "
                        f"connectFullMesh failed: rank {peer} cannot connect to rank {rank} at "
                        f"{address} (GLOO_SOCKET_IFNAME's first address; no route to host)")
                return Fault("gloo", text, f"RuntimeError: {text}")
            text = (f"NET/IB : Got completion from peer with status=IBV_WC_RETRY_EXC_ERR(12) "
                    f"opcode=IBV_WC_SEND(0) vendor_err=129 dev={via}: rank {rank}'s GID is "
                    f"{address}, which rank {peer} has no network for (a second address on "
                    "the fabric netdev, such as NVIDIA's link-local one?)")
            return Fault("nccl", text, _nccl_error(
                "remote process exited or there was a network error", "ncclRemoteError: A call "
                "failed possibly due to a network error or a remote process exiting "
                "prematurely.", text))
    return None


def _used_hcas(env: Mapping[str, str], hcas: Mapping[str, dict]) -> dict[str, dict]:
    """The HCAs NCCL uses (net_ib.cc, ncclIbInit): each device whose port is ACTIVE and that
    NCCL_IB_HCA selects (all when unset). An entry that matches no device and a port that
    is down are skipped without a word; none left, NCCL_IB_DISABLE set: {} (NET/Socket)."""
    if env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        return {}
    value = env.get("NCCL_IB_HCA")
    exclude, exact, entries = _nccl_list(value or "")
    return {n: h for n, h in hcas.items() if h.get("state") == ACTIVE
            and (not value or any(_matches(e, n, exact) for e in entries) != exclude)}


def info_lines(env: Mapping[str, str], hcas: Mapping[str, dict],
               interfaces: Mapping[str, list[str]]) -> list[str]:
    """What NCCL 2.27.7 prints at init with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET
    about its network (net_ib.cc ncclIbInit, net_socket.cc, init.cc, graph/topo.cc): the
    HCAs it uses, or NET/Socket's interfaces, and GPUDirect RDMA per HCA (GB10: off)."""
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    subsys = {w.strip().upper() for w in env.get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV")
              .lstrip("^").split(",")}
    if not subsys & {"INIT", "NET", "ALL"}:
        return []
    exclude, exact, entries = _nccl_list(env.get("NCCL_SOCKET_IFNAME") or "")
    oob = [(name, a.split("/")[0]) for name, found in interfaces.items() for a in found[:1]
           if not ipaddress.IPv4Interface(a).is_loopback
           and (not entries or any(_matches(e, name, exact) for e in entries) != exclude)]
    oob_text = f"{oob[0][0]}:{oob[0][1]}<0>" if oob else "none"
    used = list(_used_hcas(env, hcas))
    lines = [f"NCCL_IB_HCA set to {env['NCCL_IB_HCA']}"] if env.get("NCCL_IB_HCA") else []
    if not used and env.get("NCCL_IB_DISABLE", "0") in ("", "0"):
        lines.append("NET/IB : No device found.")
    if used:
        devices = "".join(f" [{i}]{name}:1/RoCE" for i, name in enumerate(used))
        lines.append(f"NET/IB : Using{devices} [RO]; OOB {oob_text}")
        lines += [f"NET/IB : GPU Direct RDMA Disabled for HCA {i} '{name}'"
                  for i, name in enumerate(used)]
        lines.append("Using network IB")
    else:
        sockets = "".join(f" [{i}]{name}:{address}<0>" for i, (name, address) in enumerate(oob))
        lines += [f"NET/Socket : Using{sockets}", "Using network Socket"]
    return lines


def network(env: Mapping[str, str], hcas: Mapping[str, dict]) -> str:
    """The network NCCL uses: IB while any HCA is left to it, else Socket (TCP)."""
    return "IB" if _used_hcas(env, hcas) else "Socket"


def _gid_address(value: str | None, hca: Mapping) -> str | None:
    """The IPv4 address of the GID NCCL uses on hca."""
    gids, types = hca.get("gids", {}), hca.get("types", {})
    if value:
        try:
            return _ipv4_of(gids.get(str(int(value)), ""))
        except ValueError:
            return None
    for index in sorted(gids, key=int):
        if types.get(index) == ROCE_V2 and _ipv4_of(gids[index]):
            return _ipv4_of(gids[index])
    return None


def check(env: Mapping[str, str], hcas: Mapping[str, dict],
          interfaces: Mapping[str, list[str]], rendezvous: str,
          ipv6: Mapping[str, list[str]] | None = None) -> Fault | None:
    """The first fault of env on this node (Gloo's first, as init_process_group comes
    first), or None. hcas: gpusim.rdma.read_rdma output; rendezvous: rank 0's address."""
    return (_gloo(env, interfaces, ipv6 or {}) or _nccl_socket(env, interfaces, rendezvous)
            or _nccl_ib(env, hcas))


def _on_network(addresses: list[str], rendezvous: str) -> bool:
    """Whether one of addresses (with prefix) is on the rendezvous address's network."""
    try:
        target = ipaddress.IPv4Address(rendezvous)
    except ValueError:  # a host name: any IPv4 address will do
        return bool(addresses)
    return any(target in ipaddress.IPv4Interface(a).network for a in addresses)


def _gloo(env, interfaces, ipv6) -> Fault | None:
    names = env.get("GLOO_SOCKET_IFNAME")
    if not names:
        return None
    for name in names.split(","):
        if gloo_address(name, interfaces, ipv6) is None:
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
    """What fails NCCL over the HCAs it uses: a GID index that is not their RoCE v2
    IPv4-mapped entry, a registration the kernel refuses. Devices it skipped fail nothing."""
    used = _used_hcas(env, hcas)
    return _gid(env.get("NCCL_IB_GID_INDEX"), used) or _registration(used)


def _registration(used: Mapping[str, dict], committed_kb: int = 0) -> Fault | None:
    """ibv_reg_mr's failure on a used HCA: at once, or (KHO's) once the node has committed
    its reg_mr_limit_kb (init's small buffers pin; the buffers after the load do not)."""
    for _, hca in sorted(used.items()):
        limit = hca.get("reg_mr_limit_kb")
        if hca.get("reg_mr_error") and (limit is None or committed_kb >= limit):
            return _system_fault(f"Call to ibv_reg_mr_iova2 failed with error "
                                 f"{hca['reg_mr_error']}")
    return None


def registration_fault(names: list[str], hcas: Mapping[str, dict],
                       committed_kb: int) -> Fault | None:
    """NCCL's registration of its buffers after the load, on the HCAs it uses (names),
    with committed_kb of the node's memory committed (MemTotal - MemAvailable)."""
    return _registration({n: h for n, h in hcas.items() if n in names}, committed_kb)


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


def rails(endpoints: Mapping) -> list[tuple[str, str]]:
    """(HCA, IPv4) of each HCA NCCL uses, from a rank's endpoints (its GIDs' addresses)."""
    return [(via, address) for via, address in endpoints.get("used", []) if via != "gloo"]


def pair_rails(mine: list[tuple[str, str]], theirs: list[str],
               networks: list[str]) -> list[tuple[tuple[str, str], str]]:
    """Each of my rails (HCA, address) with the next rank's address on its network (the
    twins sit on different subnets): a rail with no peer there carries nothing to it, as
    NCCL's rings use the rails both ends share. No rail shared at all: paired in order
    (their writes then never arrive: NCCL's retry error)."""
    prefix = {a.split("/")[0]: a for a in networks}
    paired = []
    for hca, src in mine:
        net = ipaddress.IPv4Interface(prefix[src]).network if src in prefix else None
        dst = next((d for d in theirs if net is not None and _on_network([str(net)], d)), None)
        if dst is not None:
            paired.append(((hca, src), dst))
    return paired or list(zip(mine, theirs, strict=False))


def write_fault(hca: str, src: str, dst: str, mtu: int, why: str = "") -> Fault:
    """A collective's RDMA write to dst never acknowledged: NCCL's retry-exceeded (why: the
    cause the rehearsal knows; by default its path MTU's packets did not cross)."""
    why = why or f"path MTU {mtu}: its packets do not cross the fabric"
    text = (f"NET/IB : Got completion from peer {dst}<{ROCE_PORT}> with status="
            f"IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129 dev={hca} "
            f"localGid ::ffff:{src} remoteGid ::ffff:{dst} ({why})")
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


# How long an HCA retries an unacknowledged write before IBV_WC_RETRY_EXC_ERR: NCCL's
# defaults, NCCL_IB_TIMEOUT 20 (4.096 us * 2^20 a try) and NCCL_IB_RETRY_CNT 7 retries
RETRY_WINDOW_S = 4.096e-6 * 2 ** 20 * (1 + 7)


def first_write(src: str, dst: str, size: int, seconds: float = RETRY_WINDOW_S) -> bool:
    """Whether a size-byte datagram from src (don't fragment) came back from dst's echo
    within seconds, sent again every 0.25 s (as the HCA retries an unacknowledged write;
    a busy peer that answers late is no fault, as on a real fabric)."""
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
            except TimeoutError:
                continue
            except OSError:  # refused at once (larger than the path MTU, no route): the
                time.sleep(0.25)  # next try after the HCA's interval, not a busy loop
    return False


def _ipv4_mapped(gid: str) -> bool:
    return _ipv4_of(gid) is not None


def _ipv4_of(gid: str) -> str | None:
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return None if mapped is None else str(mapped)


def _system_fault(text: str) -> Fault:
    return Fault("nccl", text, _nccl_error(
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.", text))


def _nccl_error(what: str, kind: str, last: str) -> str:
    return (f"torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            f"c10d/ProcessGroupNCCL.cpp:3356, {what}, NCCL version {NCCL_VERSION}\n{kind}\n"
            f"Last error:\n{last}")
