"""The rehearsal network on this machine: blackhole guard, the management bridge and the
fabric bridge, one namespace per node.

Order matters for network safety: the blackhole route for the whole rehearsal subnet is
installed before any bridge or node exists, so a packet for a node whose link is down is
dropped here instead of following the default route off the machine. It stays when the
rack goes down: a program that reaches for a rehearsal address then still goes nowhere.
"""

import subprocess
from ipaddress import ip_address

from sparkrack.rehearsal.cabling import Cabling
from sparkrack.rehearsal.layout import (
    FUNCTIONS,
    MGMT_MTU,
    MGMT_NETDEV,
    RACKS,
    SUBNET,
    NodeLayout,
    RackLayout,
)
from sparkrack.rehearsal.switch import Switch

LEGACY_TWIN_PEER = "p2-peer"  # the one-network layout's twin, removed on the next `up`


def ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip ARGV` (argv list, no shell)."""
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True)


def link_exists(name: str, netns: str | None = None) -> bool:
    """Whether a network link exists (optionally inside a namespace)."""
    argv = ["-n", netns] if netns else []
    return ip(*argv, "link", "show", name, check=False).returncode == 0


def install_blackhole() -> None:
    """Drop everything for the rehearsal subnet that no more specific route claims."""
    ip("route", "replace", "blackhole", str(SUBNET), "metric", "4000")



def ensure_bridge(rack: RackLayout = RACKS[1]) -> None:
    """The bridge the rack's nodes hang off, with this machine's address on the rack subnet
    and the PDU's (its SNMP agent runs on this machine)."""
    bridge, prefix = rack.bridge, rack.bridge_addr.split("/")[1]
    if not link_exists(bridge):
        ip("link", "add", bridge, "type", "bridge")
    ip("link", "set", bridge, "mtu", str(MGMT_MTU))
    ip("addr", "replace", rack.bridge_addr, "dev", bridge)
    ip("addr", "replace", f"{rack.pdu_addr}/{prefix}", "dev", bridge)
    ip("link", "set", bridge, "up")


def remove_bridge(rack: RackLayout = RACKS[1]) -> None:
    """Delete the rack's bridges (their ports go with the namespaces)."""
    for bridge in (rack.bridge, rack.fabric_bridge):
        if link_exists(bridge):
            ip("link", "del", bridge)


def netns_exists(node: NodeLayout) -> bool:
    """Whether the node's namespace exists."""
    return subprocess.run(["ip", "netns", "exec", node.netns, "true"],
                          capture_output=True).returncode == 0


def ensure_fabric_bridge(switch: Switch, rack: RackLayout = RACKS[1]) -> None:
    """The fabric's switch: a bridge at the switch's MTU and no address of this machine's,
    so nothing on the management side (this machine included) reaches the fabric."""
    bridge = rack.fabric_bridge
    if not link_exists(bridge):
        ip("link", "add", bridge, "type", "bridge")
    ip("link", "set", bridge, "mtu", str(switch.mtu))
    ip("addr", "flush", "dev", bridge)
    ip("link", "set", bridge, "up")


def ensure_node_net(node: NodeLayout, cabling: Cabling, switch: Switch,
                    powered: bool = True) -> None:
    """Namespace; the management port (enP7s7, 10 GbE at 1500) on the rack bridge; the four
    ConnectX-7 functions on the fabric bridge, each on a switch port at the switch's MTU
    and paced at its link's rate, those without a cable (or all, unpowered) dark."""
    if not netns_exists(node):
        ip("netns", "del", node.netns, check=False)
        ip("netns", "add", node.netns)
    ns = ("-n", node.netns)
    if link_exists(LEGACY_TWIN_PEER, node.netns):  # a rack of the one-network layout
        ip(*ns, "link", "del", LEGACY_TWIN_PEER, check=False)
        ip("link", "del", node.host_veth, check=False)
    rack = node.rack
    _plug(node.host_veth, MGMT_NETDEV, node.netns, rack.bridge, MGMT_MTU)
    ip("link", "set", node.host_veth, "mtu", str(MGMT_MTU))
    ip(*ns, "link", "set", MGMT_NETDEV, "mtu", str(MGMT_MTU))  # a rack of 9000 before
    # A fixed MAC per node keeps this machine's ARP cache right across re-created links
    # (a stale entry would black out the node for ~45 s until the kernel re-probes).
    ip(*ns, "link", "set", MGMT_NETDEV, "address", node_mac(node))
    ip("neigh", "flush", "to", node.address, "dev", rack.bridge, check=False)
    ip(*ns, "addr", "replace", f"{node.address}/{rack.mgmt_subnet.prefixlen}", "dev",
       MGMT_NETDEV)
    ip(*ns, "link", "set", "lo", "up")
    ip(*ns, "link", "set", MGMT_NETDEV, "up")
    for (port, path), (hca, netdev) in FUNCTIONS.items():
        host_end = node.fabric_veth(port, path)
        # a ConnectX-7 netdev as DGX OS first brings it up: MTU 1500, no address; role
        # fabric's netplan drop-in gives it both (the node's systemd-networkd applies it)
        _plug(host_end, netdev, node.netns, rack.fabric_bridge, switch.mtu, node_mtu=None)
        ip("link", "set", host_end, "mtu", str(switch.mtu))
        # frames as a NIC puts them on the wire: a veth hands the bridge a TCP super-packet
        # whole (its MTU check skips those), so a switch port at 1500 would pass jumbo TCP
        ip(*ns, "link", "set", netdev, "gso_max_segs", "1")
        ip(*ns, "link", "set", netdev, "up")
        ip("link", "set", host_end, "up" if powered and cabling.up(port, path) else "down")
        pace = min(r for r in (switch.pace_mbit(node.name, hca), cabling.rate_mbit) if r)
        limit_rate(host_end, None, pace)  # towards the node
        limit_rate(netdev, node.netns, pace)  # from it
    ip("link", "set", node.host_veth, "up" if powered else "down")


def limit_rate(dev: str, netns: str | None, mbit: int | None) -> None:
    """Shape dev's egress to mbit Mbit/s (token bucket), or take the limit off (None)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    if mbit is None:
        subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
        return
    subprocess.run([*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                    f"{mbit}mbit", "burst", "256kb", "latency", "50ms"], check=True,
                   capture_output=True)


def _plug(host_end: str, node_end: str, netns: str, bridge: str, port_mtu: int,
          node_mtu: int | None = MGMT_MTU) -> None:
    """A veth from bridge (this machine's end, a switch port at port_mtu) into the node
    (named like the node's port; node_mtu None: the kernel's default, 1500)."""
    if not link_exists(host_end):
        mtu = ["mtu", str(node_mtu)] if node_mtu else []
        ip("link", "add", host_end, "mtu", str(port_mtu), "type", "veth",
           "peer", "name", node_end, *mtu, "netns", netns)
    ip("link", "set", host_end, "master", bridge)


def unplug(node: NodeLayout) -> None:
    """Every cable of the node dark at this machine's end: nothing answers its addresses,
    not even a reset or an ICMP error (a powered-off or cut node)."""
    for (port, path) in FUNCTIONS:
        ip("link", "set", node.fabric_veth(port, path), "down", check=False)
    ip("link", "set", node.host_veth, "down", check=False)


def isolate(node: NodeLayout, on: bool) -> None:
    """The node drops what it sends to this machine (a blackhole route in its namespace for
    this machine's address): from here it is as silent as a powered-off node, while its
    peers on both networks still reach it (a partition between the operator and the rack).
    on=False takes the route away."""
    if not netns_exists(node):
        return
    route = ("route", "replace" if on else "del", "blackhole", f"{node.rack.host_addr}/32")
    ip("-n", node.netns, *route, check=on)


def is_isolated(node: NodeLayout) -> bool:
    """Whether the node drops what it sends to this machine (isolate)."""
    out = ip("-n", node.netns, "route", "show", "type", "blackhole", check=False).stdout
    return any(line.split()[:2] == ["blackhole", node.rack.host_addr]
               for line in out.splitlines())


def node_mac(node: NodeLayout) -> str:
    """The node port's locally administered MAC, derived from its address."""
    return "02:77:" + ":".join(f"{b:02x}" for b in ip_address(node.address).packed)


def remove_node_net(node: NodeLayout) -> None:
    """Delete the node's namespace and this machine's ends of its cables."""
    for name in host_ends(node):
        if link_exists(name):
            ip("link", "del", name, check=False)
    ip("netns", "del", node.netns, check=False)


def host_ends(node: NodeLayout) -> list[str]:
    """This machine's ends of the node's management and fabric cables."""
    return [node.host_veth, *(node.fabric_veth(port, path) for port, path in FUNCTIONS)]


def link_is_up(node: NodeLayout) -> bool:
    """Whether the node's management cable is connected (this machine's end up)."""
    out = ip("-o", "link", "show", node.host_veth, check=False).stdout
    return ",UP" in out.split(">")[0]


def stale_namespaces(rack: RackLayout = RACKS[1]) -> list[str]:
    """The rack's namespaces present on this machine (sr-*; a second rack's s2-*)."""
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"{rack.prefix}-")]
