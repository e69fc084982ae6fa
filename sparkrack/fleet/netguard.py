"""Network safety: decide, before any connection, whether a node's address may be contacted
(docs/security.md#network-safety). `check_node` returns the vetted address: connect to it,
not to the name.
"""

from __future__ import annotations

import os
import socket
import sys
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from pathlib import Path

from sparkrack.core.errors import UnsafeAddressError
from sparkrack.inventory import Node

REHEARSAL_SUBNET = ip_network("10.77.0.0/16")
REHEARSAL_BRIDGE = "srbr0"
REHEARSAL_STATE_FILE = Path("/run/sparkrack-rehearsal/rack.json")
SANDBOX_ENV = "SPARKRACK_SANDBOX"
EXAMPLE_RANGES = tuple(ip_network(net) for net in
                       ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
SYS_CLASS_NET = Path("/sys/class/net")
PROC_NET_ROUTE = Path("/proc/net/route")
HOSTS_FILE = Path("/etc/hosts")
# Written by `rehearsal.up` into every rehearsal node's own disk, never on this machine.
REHEARSAL_NODE_MARK = Path("/etc/gpu-sim/node.json")

IPAddress = IPv4Address | IPv6Address


def sandboxed() -> bool:
    """Whether the sandbox rule is on: only loopback and the rehearsal subnet."""
    return os.environ.get(SANDBOX_ENV) == "1"


def rehearsal_rack_down_reason() -> str | None:
    """Why the rehearsal rack counts as down (state file, bridge, blackhole), or None if up
    (or if this process runs inside one of its nodes: inside_rehearsal_node)."""
    if inside_rehearsal_node():
        return None
    if not REHEARSAL_STATE_FILE.is_file():
        return f"no {REHEARSAL_STATE_FILE}"
    if not (SYS_CLASS_NET / REHEARSAL_BRIDGE).exists():
        return f"no bridge {REHEARSAL_BRIDGE}"
    try:
        routes = PROC_NET_ROUTE.read_text()
    except OSError:
        routes = ""
    if not blackhole_present(routes):
        return f"no blackhole route for {REHEARSAL_SUBNET}"
    return None


def inside_rehearsal_node() -> bool:
    """Whether this process runs inside a rehearsal node of a running rack: the node's
    simulated-GPU identity file is there and this network namespace has no default route
    (a node's namespace holds only its links on the rack's subnets)."""
    if not REHEARSAL_NODE_MARK.is_file():
        return False
    try:
        routes = PROC_NET_ROUTE.read_text()
    except OSError:
        return False
    return not default_route_present(routes)


def default_route_present(route_table: str) -> bool:
    """Whether a /proc/net/route table holds an IPv4 default route (0.0.0.0/0)."""
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            return True
    return False


def blackhole_present(route_table: str) -> bool:
    """Whether a /proc/net/route table holds the blackhole route for the rehearsal subnet.

    A blackhole route has no interface (Iface `*`); addresses are the kernel's u32 in host
    byte order, e.g. 10.77.0.0/16 is Destination 00004D0A, Mask 0000FFFF on little-endian.
    """
    destination = _route_hex(REHEARSAL_SUBNET.network_address.packed)
    mask = _route_hex(REHEARSAL_SUBNET.netmask.packed)
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and (fields[0], fields[1].upper(), fields[7].upper()) == (
                "*", destination, mask):
            return True
    return False


def check_node(node: Node) -> str:
    """The address to connect to for node, once every address of it passed the rules.

    Raises UnsafeAddressError (one line naming the node and the address) otherwise.
    """
    addresses = _resolve(node)
    for address in addresses:
        _check_address(node, address)
    return str(addresses[0])


def check_device(name: str, address: str, port: int) -> str:
    """check_node for a device of the rack that is not a node (the PDU): the same rules."""
    return check_node(Node(name, address, port, "", None, -1, address, None))  # type: ignore[arg-type]


def _check_address(node: Node, address: IPAddress) -> None:
    """UnsafeAddressError unless node may be contacted at address (one of its addresses)."""
    plain = address
    if isinstance(address, IPv6Address) and address.ipv4_mapped:
        plain = address.ipv4_mapped  # ::ffff:192.0.2.11 is 192.0.2.11
    shown = node.address if str(plain) == node.address else f"{node.address} = {plain}"
    who = f"{node.name} ({shown})"
    if any(plain in net for net in EXAMPLE_RANGES):
        raise UnsafeAddressError(f"{who}: the address is an example from the inventory",
                                 fix="put your node's real address in the inventory's hosts.yml")
    if plain in REHEARSAL_SUBNET:
        reason = rehearsal_rack_down_reason()
        if reason:
            raise UnsafeAddressError(f"{who}: rehearsal rack is down: run `invoke rehearsal.up`"
                                     f" ({reason})")
        return
    if sandboxed() and not plain.is_loopback:
        raise UnsafeAddressError(
            f"{who}: not on this machine; with {SANDBOX_ENV}=1 only loopback and the "
            f"rehearsal subnet {REHEARSAL_SUBNET} may be contacted",
            fix="use the rehearsal inventory, inventory/rehearsal")


def _resolve(node: Node) -> list[IPAddress]:
    """Every address of node: the address itself, else what its name resolves to.

    In the sandbox a name is looked up in /etc/hosts only: a DNS query is itself a packet
    to a server elsewhere. Outside it, the system resolver answers; its errors propagate
    as OSError (socket.gaierror).
    """
    try:
        return [ip_address(node.address)]
    except ValueError:
        pass
    if sandboxed():
        found = _hosts_file_addresses(node.address)
        if not found:
            raise UnsafeAddressError(
                f"{node.name} ({node.address}): name not in {HOSTS_FILE}, and the sandbox "
                "never asks DNS", fix="use an IP address in the inventory")
        return found
    infos = socket.getaddrinfo(node.address, node.port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ip_address(info[4][0].split("%")[0]) for info in infos))


def _hosts_file_addresses(name: str) -> list[IPAddress]:
    """The addresses /etc/hosts gives for name, in file order."""
    try:
        lines = HOSTS_FILE.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and name.lower() in (alias.lower() for alias in fields[1:]):
            try:
                found.append(ip_address(fields[0].split("%")[0]))
            except ValueError:
                continue
    return list(dict.fromkeys(found))


def _route_hex(packed: bytes) -> str:
    """An IPv4 address or mask as /proc/net/route prints it (a u32 in host byte order)."""
    return f"{int.from_bytes(packed, sys.byteorder):08X}"
