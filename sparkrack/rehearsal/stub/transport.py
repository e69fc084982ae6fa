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
- the node's kernel fails memory registration (KHO's CMA, the driver says so per HCA):
  `Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory`.

Unset variables leave the choice to the libraries, as they do: every HCA, NCCL's own GID
selection, the interface of the host name. Pure except `local_interfaces`.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from .group import NCCL_VERSION

ROCE_V2 = "RoCE v2"
ACTIVE = "4: ACTIVE"
_SIOCGIFADDR, _SIOCGIFNETMASK = 0x8915, 0x891B


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
    return _gid(env.get("NCCL_IB_GID_INDEX"), used) or _registration(used)


def _registration(used: Mapping[str, dict]) -> Fault | None:
    for _, hca in sorted(used.items()):
        if hca.get("reg_mr_error"):
            return _system_fault(f"Call to ibv_reg_mr_iova2 failed with error "
                                 f"{hca['reg_mr_error']}")
    return None


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
