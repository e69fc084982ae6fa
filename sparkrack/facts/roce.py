"""A node's RoCE side: each HCA (present, port state, netdevs, GID table; the probed
RoCE v2 IPv4-mapped GID index) and the node's network interfaces. The kinds: HCA (gather.py's
`hca_section`), FUNCTIONS (`functions_section`: every RDMA device, how the node is cabled)
and NETDEVS (`net_section`), each beside its parser."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack.facts.queries import Fact, Query
from sparkrack.inventory import Node
from sparkrack.remote.gather import functions_section, hca_section, net_section

ROCE_V2 = "RoCE v2"
_SPARK_HCA = re.compile(r"roce((?:P\d+)?p\d+s\d+f(\d+))")


def netdev_of(hca: str) -> str | None:
    """The netdev of one of a Spark's ConnectX-7 RDMA functions, as `ibdev2netdev` pairs
    them (mlx5 names both from the PCI address): rocep1s0f1 -> enp1s0f1np1, roceP2p1s0f0 ->
    enP2p1s0f0np0; None for a name of another shape."""
    match = _SPARK_HCA.fullmatch(hca)
    return f"en{match[1]}np{match[2]}" if match else None


def fabric_addresses(hcas: Sequence[str], socket_ifname: str, roce_addr: str | None,
                     twin_addr: str | None) -> dict[str, dict[str, str | None]]:
    """{HCA: {"netdev", "address"}} of the cabled port's functions, in nccl_ib_hca order: the
    socket interface's function carries roce_addr (the first function when the socket
    interface is another, such as the management port), the twins roce_twin_addr (None:
    no address; roce_addr None: it is the management address, on no function)."""
    netdevs = {hca: netdev_of(hca) for hca in hcas if netdev_of(hca)}
    holder = socket_ifname if socket_ifname in netdevs.values() else next(iter(netdevs.values()), None)
    return {hca: {"netdev": netdev, "address": roce_addr if netdev == holder else twin_addr}
            for hca, netdev in netdevs.items()}


def node_fabric(node: Node) -> dict[str, dict[str, str | None]]:
    """fabric_addresses of an inventory node (roce_addr equal to its management address is
    on no function)."""
    return fabric_addresses(node.vars.nccl_ib_hca, node.vars.nccl_socket_ifname,
                            None if node.roce_addr == node.address else node.roce_addr,
                            node.roce_twin_addr or None)


def socket_address(node: Node) -> str:
    """The address a node's ranks advertise and meet at (SGLANG_HOST_IP, the rendezvous):
    the one on nccl_socket_ifname, roce_addr when that is a function of nccl_ib_hca, else
    the management address (NCCL's sockets over enP7s7, as NVIDIA's scripts run them)."""
    functions = {netdev_of(hca) for hca in node.vars.nccl_ib_hca}
    return node.roce_addr if node.vars.nccl_socket_ifname in functions else node.address


def wanted_gids(fabric: Mapping[str, Mapping[str, str | None]]) -> dict[str, str]:
    """{HCA: address} of the functions that carry a fabric address (choose_gid's input)."""
    return {hca: f["address"] for hca, f in fabric.items() if f["address"]}


ACTIVE = "4: ACTIVE"  # ports/1/state of a port whose link is up


EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
# A Spark's ConnectX-7: two QSFP ports, each reached over two PCIe paths (`ibdev2netdev`)
SPARK_HCAS = ("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1")


def roce_query(hca: str) -> Query:
    """An RDMA device: present, port state, netdevs, GID table."""
    return HCA.query(hca, value=(hca,))


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
    """One `functions_section`'s lines: {HCA: Function} for every RDMA device of the node,
    PCIe domain 0's before the second path's (rocep1s0f0, rocep1s0f1, roceP2p1s0f0, ...: as
    ibdev2netdev lists them)."""
    found = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 3 and parts[0]:
            found[parts[0]] = Function(parts[0], tuple(n for n in parts[1].split(",") if n),
                                       parts[2])
    return dict(sorted(found.items(), key=lambda item: (item[0].startswith("roceP"), item[0])))


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
    def ipv4_gids(self) -> dict[int, str]:
        """{index: IPv4 address} of the RoCE v2 entries whose GID is IPv4-mapped, in index
        order: one for each IPv4 address the netdev carries (the kernel adds a v1/v2 pair
        per address, in the order the addresses arrive)."""
        found = {}
        for index in sorted(self.gids):
            address = ipv4_of(self.gids[index])
            if self.types.get(index) == ROCE_V2 and address is not None:
                found[index] = address
        return found

    @property
    def ipv4_gid_index(self) -> int | None:
        """The lowest RoCE v2 IPv4-mapped index (the table's shape, for a capture or a
        baseline; NCCL's index is chosen by address: choose_gid)."""
        return next(iter(self.ipv4_gids), None)

    def gid_index_of(self, address: str) -> int | None:
        """The index of the RoCE v2 entry that carries address (None: no such entry)."""
        return next((i for i, a in self.ipv4_gids.items() if a == address), None)


@dataclass(frozen=True)
class GidChoice:
    """The GID index NCCL is to use on a node: each HCA's RoCE v2 entry for its netdev's
    fabric address (by address, not position: a netdev with a second address has a second
    pair), whether the HCAs agree, and the other IPv4 addresses their tables hold."""

    indexes: Mapping[str, int | None]  # HCA -> index of its fabric address's entry
    wanted: Mapping[str, str]  # HCA -> the fabric address its netdev should carry
    others: Mapping[str, tuple[str, ...]]  # HCA -> the other IPv4 addresses in its table

    @property
    def index(self) -> int | None:
        """The one index at which every HCA carries its fabric address; None when one
        carries none or they differ."""
        found = set(self.indexes.values())
        return found.pop() if len(found) == 1 and None not in found else None

    @property
    def conflict(self) -> bool:
        """Whether the HCAs carry their fabric addresses at different indexes."""
        return len({i for i in self.indexes.values() if i is not None}) > 1

    @property
    def missing(self) -> list[str]:
        """'HCA (address)' for each HCA whose table has no entry for its fabric address."""
        return [f"{hca} ({self.wanted[hca]})" for hca, i in self.indexes.items() if i is None]

    @property
    def others_text(self) -> str:
        """'; other IPv4 GIDs: 169.254.3.7 on rocep1s0f0' or ''."""
        seen = [f"{a} on {hca}" for hca, found in self.others.items() for a in found]
        return f"; other IPv4 GIDs: {', '.join(seen)}" if seen else ""


def choose_gid(hcas: Mapping[str, HcaFacts], wanted: Mapping[str, str]) -> GidChoice:
    """The GID choice for the HCAs of wanted ({HCA: its netdev's fabric address}); an HCA
    absent from the node is left out (it fails a check of its own)."""
    present = {hca: address for hca, address in wanted.items()
               if hcas.get(hca, HcaFacts()).present}
    indexes = {hca: hcas[hca].gid_index_of(address) for hca, address in present.items()}
    others = {hca: tuple(a for a in hcas[hca].ipv4_gids.values() if a != address)
              for hca, address in present.items()}
    return GidChoice(indexes, present, {h: found for h, found in others.items() if found})


@dataclass(frozen=True)
class RoceFacts:
    """The node's HCAs."""

    hcas: Mapping[str, HcaFacts] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return [name for name, hca in self.hcas.items() if not hca.present]

    @property
    def down(self) -> list[str]:
        """Present HCAs whose port 1 is not ACTIVE (a cable out, the switch port down)."""
        return [name for name, hca in self.hcas.items() if hca.present and hca.state != ACTIVE]

    def choose(self, wanted: Mapping[str, str]) -> GidChoice:
        """choose_gid on this node's HCAs (role nccl_env's template calls it)."""
        return choose_gid(self.hcas, wanted)


ADDRESS_FIX = ("NetworkManager can drop a fabric address at boot (NVIDIA's performance "
               "guide): `invoke provision --role fabric` writes and applies the fabric's "
               "netplan again; until then Gloo would take the IPv6 link-local address and the "
               "start hang")


def lost_addresses(fabric: Mapping[str, Mapping[str, str | None]],
                   hcas: Mapping[str, HcaFacts]) -> list[str]:
    """'NETDEV (HCA) has WHAT, not the inventory's ADDRESS' for each function whose netdev
    does not carry its fabric address (its GID table holds one RoCE v2 entry per IPv4
    address of the netdev); an HCA absent from the node fails a check of its own."""
    lost = []
    for hca, function in fabric.items():
        facts = hcas.get(hca, HcaFacts())
        wanted = function.get("address")
        if not wanted or not facts.present or wanted in facts.ipv4_gids.values():
            continue
        found = list(dict.fromkeys(facts.ipv4_gids.values()))
        what = (f"IPv4 {', '.join(found)}" if found else
                "no IPv4 address (only its IPv6 link-local one)")
        lost.append(f"{function['netdev']} ({hca}) has {what}, not the inventory's {wanted}")
    return lost


def ipv4_of(gid: str) -> str | None:
    """The IPv4 address of a GID as sysfs prints it, when it is IPv4-mapped (::ffff:a.b.c.d)."""
    try:
        mapped = ipaddress.IPv6Address(gid.strip()).ipv4_mapped
    except ValueError:
        return None
    return None if mapped is None else str(mapped)


def parse_hca(lines: list[str]) -> HcaFacts:
    """One `hca_section`'s lines: presence, port state, netdevs and the GID table's filled
    entries."""
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


HCA = Fact(hca_section, parse_hca)
FUNCTIONS = Fact(functions_section, parse_functions).query()
NETDEVS = Fact(net_section, parse_netdevs).query()
