"""The rehearsal network on this machine: blackhole guard, bridge, one namespace per node.

Order matters for network safety: the blackhole route for the whole rehearsal subnet is
installed before any bridge or node exists, so a packet for a node whose link is down is
dropped here instead of following the default route off the machine.
"""

import subprocess
from ipaddress import ip_address

from .layout import BRIDGE, BRIDGE_ADDR, MTU, NODE_NETDEV, SUBNET, TWIN_NETDEV, NodeLayout

TWIN_PEER = "p2-peer"


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


def remove_blackhole() -> None:
    """Remove the guard route (only after every node and the bridge are gone)."""
    ip("route", "del", "blackhole", str(SUBNET), "metric", "4000", check=False)


def ensure_bridge() -> None:
    """The bridge the nodes hang off, with this machine's address on the rack subnet."""
    if not link_exists(BRIDGE):
        ip("link", "add", BRIDGE, "type", "bridge")
    ip("link", "set", BRIDGE, "mtu", str(MTU))
    ip("addr", "replace", BRIDGE_ADDR, "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    """Delete the bridge (its ports go with the namespaces)."""
    if link_exists(BRIDGE):
        ip("link", "del", BRIDGE)


def netns_exists(node: NodeLayout) -> bool:
    """Whether the node's namespace exists."""
    return subprocess.run(["ip", "netns", "exec", node.netns, "true"],
                          capture_output=True).returncode == 0


def ensure_node_net(node: NodeLayout) -> None:
    """Namespace, veth to the bridge (named like a Spark's CX7 port) and the twin netdev."""
    if not netns_exists(node):
        ip("netns", "del", node.netns, check=False)
        ip("netns", "add", node.netns)
    if not link_exists(node.host_veth):
        ip("link", "add", node.host_veth, "mtu", str(MTU), "type", "veth",
           "peer", "name", NODE_NETDEV, "mtu", str(MTU), "netns", node.netns)
    ip("link", "set", node.host_veth, "master", BRIDGE, "up")
    ns = ("-n", node.netns)
    # A fixed MAC per node keeps this machine's ARP cache right across re-created links
    # (a stale entry would black out the node for ~45 s until the kernel re-probes).
    ip(*ns, "link", "set", NODE_NETDEV, "address", node_mac(node))
    ip("neigh", "flush", "to", node.address, "dev", BRIDGE, check=False)
    ip(*ns, "addr", "replace", f"{node.address}/24", "dev", NODE_NETDEV)
    ip(*ns, "link", "set", "lo", "up")
    ip(*ns, "link", "set", NODE_NETDEV, "up")
    if not link_exists(TWIN_NETDEV, node.netns):
        ip(*ns, "link", "add", TWIN_NETDEV, "mtu", str(MTU), "type", "veth",
           "peer", "name", TWIN_PEER, "mtu", str(MTU))
    ip(*ns, "addr", "replace", f"{node.twin_address}/24", "dev", TWIN_NETDEV)
    ip(*ns, "link", "set", TWIN_PEER, "up")
    ip(*ns, "link", "set", TWIN_NETDEV, "up")


def node_mac(node: NodeLayout) -> str:
    """The node port's locally administered MAC, derived from its address."""
    return "02:77:" + ":".join(f"{b:02x}" for b in ip_address(node.address).packed)


def remove_node_net(node: NodeLayout) -> None:
    """Delete the node's namespace and its host-side veth."""
    if link_exists(node.host_veth):
        ip("link", "del", node.host_veth, check=False)
    ip("netns", "del", node.netns, check=False)


def set_link(node: NodeLayout, up: bool) -> None:
    """Cut or heal the node's cable (node side, so the host route stays)."""
    ip("-n", node.netns, "link", "set", NODE_NETDEV, "up" if up else "down")


def link_is_up(node: NodeLayout) -> bool:
    """Whether the node's cable is connected."""
    out = ip("-n", node.netns, "-o", "link", "show", NODE_NETDEV, check=False).stdout
    return "state UP" in out or ",UP" in out.split(">")[0]


def stale_namespaces() -> list[str]:
    """Rehearsal namespaces present on this machine (sr-*)."""
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("sr-")]
