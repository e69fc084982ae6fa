"""Which rails a fabric check measures, and what it makes of the figures (pure): a jumbo frame
to every peer rail, a burst to the neighbour, each rail judged against its negotiated rate,
a floor and the rack's median (docs/provisioning.md#the-fabric-check).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_interface

from sparkrack.facts.onboard import NetdevFacts
from sparkrack.facts.roce import Function

FAR_BELOW = 0.5  # a rail under half the rack's median rate is named
FLOOR_SHARE = 0.1  # a rail carrying less than this share of its negotiated rate is named
_RATE = re.compile(r"(\d+(?:\.\d+)?) Gb/sec")  # ports/1/rate: "200 Gb/sec (2X NDR)"


@dataclass(frozen=True)
class Rail:
    """One cabled RoCE function of a node, with its netdev's address."""

    node: str
    hca: str
    netdev: str
    ipv4: str  # without its prefix ('' when the netdev has none)
    mtu: int | None
    network: str = ""  # its subnet, e.g. 10.77.3.0/24 ('' without an address)
    rate: str = ""  # its HCA's ports/1/rate, e.g. "200 Gb/sec (2X NDR)" ('' unknown)

    @property
    def negotiated_gbit(self) -> float | None:
        """The rate its link negotiated, in Gbit/s (None: unknown)."""
        found = _RATE.match(self.rate)
        return float(found[1]) if found else None


@dataclass(frozen=True)
class Pair:
    """One burst: from src's rail to the same rail of its neighbour dst; before it, a
    full-size frame to each of the others (the other nodes' rails on the subnet)."""

    src: Rail
    dst: Rail
    others: tuple[Rail, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.src.node} -> {self.dst.node} on {self.src.netdev} ({self.src.hca})"


@dataclass(frozen=True)
class Measured:
    """What one burst gave."""

    pair: Pair
    jumbo: str = ""  # "ok" or why not
    bytes: int = 0
    seconds: float = 0.0
    error: str = ""
    reach: Mapping[str, str] = field(default_factory=dict)  # other's ipv4: "ok" or why not

    @property
    def gbit_s(self) -> float:
        return self.bytes * 8 / self.seconds / 1e9 if self.seconds > 0 else 0.0


def rails_of(node: str, functions: Mapping[str, Function],
             links: Mapping[str, NetdevFacts], rates: Mapping[str, str] | None = None
             ) -> list[Rail]:
    """The node's rails: its functions that are up, each netdev with its address (and its
    HCA's ports/1/rate, from rates)."""
    rails = []
    for function in functions.values():
        if not function.up:
            continue
        for netdev in function.netdevs:
            link = links.get(netdev, NetdevFacts())
            network = str(ip_interface(link.ipv4).network) if link.ipv4 else ""
            rails.append(Rail(node, function.name, netdev, link.ipv4.split("/")[0], link.mtu,
                              network, (rates or {}).get(function.name, "")))
    return sorted(rails, key=lambda r: (r.hca.startswith("roceP"), r.hca))


def idle_rails(node: str, wanted: Sequence[str], functions: Mapping[str, Function]) -> list[str]:
    """One line per HCA of the node's nccl_ib_hca that carries nothing of its share: its
    port down, or no such device. NCCL skips it without an error and runs on the rails
    left; a port that goes down while serving fails NCCL's connections on that rail."""
    left = [h for h in wanted if h in functions and functions[h].up]
    runs = (f"runs on {', '.join(left)} alone, about {len(left)}/{len(wanted)} of the node's "
            "bandwidth" if left else "falls back to TCP (NET/Socket)")
    found = []
    for hca in wanted:
        function = functions.get(hca)
        if function is None:
            found.append(f"{node}: {hca} of nccl_ib_hca is no RDMA device of {node} (it has "
                         f"{', '.join(functions) or 'none'}): NCCL skips it without an error "
                         f"and {runs}; fix nccl_ib_hca in host_vars/{node}.yml")
        elif not function.up:
            found.append(f"{node}: {hca} ({', '.join(function.netdevs) or 'no netdev'}) of "
                         f"nccl_ib_hca carries nothing: its port is down "
                         f"({function.state or 'no state'}); NCCL skips it without an error "
                         f"and {runs}; reseat its cable (`invoke run --limit {node} -- "
                         "ibdev2netdev` shows the ports)")
    return found


def pairs(order: Sequence[str], rails: Mapping[str, list[Rail]]) -> tuple[list[Pair], list[str]]:
    """Each node to its neighbour in order, rail to the neighbour's rail on the same subnet
    (a node cabled on the other port still reaches its peers through the switch); and what
    cannot be measured (a node with no rail up, a rail without an address or without a
    peer on its subnet)."""
    found, problems = [], []
    for index, node in enumerate(order):
        mine = rails.get(node, [])
        if not mine:
            problems.append(f"{node}: no RoCE function is up (no cable?)")
            continue
        if len(order) < 2:
            continue
        neighbour = order[(index + 1) % len(order)]
        theirs = {r.network: r for r in rails.get(neighbour, []) if r.network}
        for rail in mine:
            other = theirs.get(rail.network)
            if not rail.ipv4:
                problems.append(f"{node}: {rail.netdev} ({rail.hca}) is up without an IPv4 "
                                "address")
            elif other is None:
                problems.append(f"{node}: {rail.netdev} ({rail.hca}, {rail.ipv4}) has no peer "
                                f"on {neighbour} in {rail.network}")
            else:
                found.append(Pair(rail, other, tuple(
                    r for peer in order if peer not in (node, neighbour)
                    for r in rails.get(peer, []) if r.network == rail.network)))
    return found, problems


def judge(measured: Sequence[Measured], *, link_gbit: float | None = None,
          scale: float = 1.0, mtu: int = 9000) -> list[str]:
    """One line per rail that failed its full-size (mtu-byte) frame or burst, negotiated
    less than link_gbit, carried less than FLOOR_SHARE of its negotiated rate, or ran far
    below the median. scale: link Gbit/s per measured Gbit/s (1 on a real rack)."""
    problems = _rates(measured, link_gbit, scale)
    for m in measured:  # a frame that did not pass says why a burst stalled: both named
        for other in m.pair.others:
            why = m.reach.get(other.ipv4, "" if m.error else "not tried (the burst did not run)")
            if why not in ("ok", ""):
                problems.append(f"{m.pair.src.node} -> {other.node} on {m.pair.src.netdev} "
                                f"({m.pair.src.hca}): a {mtu}-byte frame did not pass: {why}")
        if m.jumbo != "ok" and (m.jumbo or not m.error):
            problems.append(f"{m.pair.name}: a {mtu}-byte frame did not pass: {m.jumbo}")
        if m.error:
            problems.append(f"{m.pair.name}: {m.error}")
    rates = [m.gbit_s for m in measured if not m.error and m.seconds > 0]
    if len(rates) < 2:
        return problems
    median = statistics.median(rates)
    slow = [m for m in measured if not m.error and m.seconds > 0 and m.gbit_s < FAR_BELOW * median]
    for m in slow:
        problems.append(f"{m.pair.name}: {m.gbit_s * scale:.2f} Gbit/s, far below the rack's "
                        f"median {median * scale:.2f} Gbit/s{_common(m, slow)}")
    return problems


def _rates(measured: Sequence[Measured], link_gbit: float | None, scale: float) -> list[str]:
    """The rails whose link negotiated less than link_gbit, or that carried less than
    FLOOR_SHARE of what it negotiated."""
    problems = []
    for m in measured:
        negotiated, rail = m.pair.src.negotiated_gbit, m.pair.src
        if negotiated is None:
            continue
        if link_gbit and negotiated < link_gbit:
            problems.append(f"{rail.node}: {rail.netdev} ({rail.hca}) negotiated {rail.rate}, "
                            f"below the rack's {link_gbit:g} Gb/sec (fabric_link_gbit): a "
                            "breakout leg, a cable or a switch port set slower")
        if not m.error and m.seconds > 0 and m.gbit_s * scale < FLOOR_SHARE * negotiated:
            problems.append(f"{m.pair.name}: {m.gbit_s * scale:.1f} Gbit/s, below the floor "
                            f"of {FLOOR_SHARE * negotiated:g} Gbit/s ({FLOOR_SHARE:.0%} of its "
                            f"negotiated {negotiated:g})")
    return problems


def _common(m: Measured, slow: Sequence[Measured]) -> str:
    """', probably NODE's RAIL' when the slow bursts of this rail share one node."""
    same = [s for s in slow if s.pair.src.netdev == m.pair.src.netdev]
    if len(same) < 2:
        return ""
    nodes = set.intersection(*({s.pair.src.node, s.pair.dst.node} for s in same))
    if len(nodes) != 1:
        return ""
    return f" (probably {nodes.pop()}'s {m.pair.src.netdev}: every slow burst on it touches it)"
