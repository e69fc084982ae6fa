"""A node's RoCE side: each HCA (present, port state, netdevs, GID table; the probed
RoCE v2 IPv4-mapped GID index) and the node's network interfaces."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .queries import Query

ROCE_V2 = "RoCE v2"
_SPARK_HCA = re.compile(r"roce((?:P\d+)?p\d+s\d+f(\d+))")


def netdev_of(hca: str) -> str | None:
    """The netdev of one of a Spark's ConnectX-7 RDMA functions, as `ibdev2netdev` pairs
    them (mlx5 names both from the PCI address): rocep1s0f1 -> enp1s0f1np1, roceP2p1s0f0 ->
    enP2p1s0f0np0; None for a name of another shape."""
    match = _SPARK_HCA.fullmatch(hca)
    return f"en{match[1]}np{match[2]}" if match else None


ACTIVE = "4: ACTIVE"  # ports/1/state of a port whose link is up


EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
# A Spark's ConnectX-7: two QSFP ports, each reached over two PCIe paths (`ibdev2netdev`)
SPARK_HCAS = ("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1")


def roce_query(hca: str) -> Query:
    """An RDMA device: present, port state, netdevs, GID table."""
    return Query("roce", (hca,), ("r", hca))


NETDEVS = Query("netdevs", (), ("n",))
FUNCTIONS = Query("functions", (), ("a",))  # every RDMA device: how the node is cabled


@dataclass(frozen=True)
class Function:
    """One RDMA device as the cabling shows it: its netdevs and whether its port is up."""

    name: str
    netdevs: tuple[str, ...]
    state: str

    @property
    def up(self) -> bool:
        return self.state == ACTIVE


def parse_functions(lines: list[str]) -> dict[str, Function]:
    """The `a` section: {HCA: Function} for every RDMA device of the node."""
    found = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 3 and parts[0]:
            found[parts[0]] = Function(parts[0], tuple(n for n in parts[1].split(",") if n),
                                       parts[2])
    return found


def cabling_hint(node: str, functions: Mapping[str, Function]) -> str:
    """What is up on the node and the inventory values that would use it, for a message
    about HCAs or a socket interface that are down."""
    # a PCIe domain-0 function (rocep1s0f1) before its twin on the second path (roceP2...)
    up = sorted((f for f in functions.values() if f.up),
                key=lambda f: (f.name.startswith("roceP"), f.name))
    if not up:
        seen = ", ".join(f"{f.name} {f.state or 'no state'}" for f in functions.values())
        return f"no RoCE function is up on {node} ({seen or 'no RDMA device'}): check its cable"
    shown = "; ".join(f"{f.name} ({', '.join(f.netdevs)})" for f in up)
    netdev = next((n for f in up for n in f.netdevs), "")
    return (f"up on {node}: {shown}; if it is cabled there, set in host_vars/{node}.yml: "
            f"nccl_ib_hca: [{', '.join(f.name for f in up)}]"
            + (f", nccl_socket_ifname: {netdev}" if netdev else ""))


def netdev_down(netdev: str, functions: Mapping[str, Function]) -> bool:
    """Whether netdev belongs to an RDMA device whose port is down (no cable there)."""
    return any(netdev in f.netdevs and not f.up for f in functions.values())


@dataclass(frozen=True)
class HcaFacts:
    """One RDMA device under /sys/class/infiniband."""

    present: bool = False
    state: str = ""
    rate: str = ""  # ports/1/rate: "200 Gb/sec (4X NDR)"
    netdevs: tuple[str, ...] = ()
    types: Mapping[int, str] = field(default_factory=dict)
    gids: Mapping[int, str] = field(default_factory=dict)

    @property
    def ipv4_gid_index(self) -> int | None:
        """The lowest GID index whose type is RoCE v2 and whose GID is IPv4-mapped."""
        for index in sorted(self.gids):
            if self.types.get(index) == ROCE_V2 and is_ipv4_mapped(self.gids[index]):
                return index
        return None


@dataclass(frozen=True)
class RoceFacts:
    """The node's HCAs and the NCCL GID index they agree on."""

    hcas: Mapping[str, HcaFacts] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return [name for name, hca in self.hcas.items() if not hca.present]

    @property
    def down(self) -> list[str]:
        """Present HCAs whose port 1 is not ACTIVE (a cable out, the switch port down)."""
        return [name for name, hca in self.hcas.items() if hca.present and hca.state != ACTIVE]

    @property
    def gid_indexes(self) -> dict[str, int | None]:
        return {name: hca.ipv4_gid_index for name, hca in self.hcas.items() if hca.present}

    @property
    def gid_conflict(self) -> bool:
        """Whether the HCAs put their RoCE v2 IPv4 GID at different indexes (NCCL takes one)."""
        return len({i for i in self.gid_indexes.values() if i is not None}) > 1

    @property
    def gid_index(self) -> int | None:
        """The probed GID index common to every present HCA that has one, else None."""
        found = {i for i in self.gid_indexes.values() if i is not None}
        return found.pop() if len(found) == 1 else None


def is_ipv4_mapped(gid: str) -> bool:
    """Whether a GID as sysfs prints it is an IPv4-mapped IPv6 address (::ffff:a.b.c.d)."""
    try:
        return ipaddress.IPv6Address(gid.strip()).ipv4_mapped is not None
    except ValueError:
        return False


def parse_hca(lines: list[str]) -> HcaFacts:
    """One `r` section: presence, port state, netdevs and the GID table's filled entries."""
    if not lines or lines[0] != "present":
        return HcaFacts()
    state, rate, netdevs = "", "", []
    types: dict[int, str] = {}
    gids: dict[int, str] = {}
    target: dict[int, str] | None = None
    for line in lines[1:]:
        if line == "types":
            target = types
        elif line == "gids":
            target = gids
        elif target is None:
            key, _, rest = line.partition(" ")
            if key == "state":
                state = rest
            elif key == "rate":
                rate = rest
            elif key == "netdev":
                netdevs.append(rest)
        else:
            index, sep, value = line.partition(":")
            if sep and index.isdigit():
                target[int(index)] = value.strip()
    return HcaFacts(present=True, state=state, rate=rate, netdevs=tuple(netdevs), types=types,
                    gids=gids)


def parse_netdevs(lines: list[str]) -> tuple[str, ...]:
    """The interface names of /proc/net/dev (the node's own network namespace)."""
    return tuple(line.split(":", 1)[0].strip() for line in lines if ":" in line
                 and "|" not in line)
