"""How fast the group's collectives move data, from the rails each rank's NCCL uses
(stdlib only; docs/rehearsal.md#the-stub-engines, "The fabric's bandwidth"). A prefill's
tensor-parallel all-reduces go round the ring, so the slowest hop sets the pace: a hop on
both twins of a Spark's port carries 161 Gbit/s, on one PCIe path 98 (public reports), on
NET/Socket at most its interface's rate (the management port: 10 GbE). The configured
prefill rate is the rack's with every hop on both rails; the fabric's share of it is
slowed by the hop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from . import transport

PORT_GBIT = 161.0  # both PCIe x4 paths of one QSFP port together, measured (public report)
PATH_GBIT = 98.0  # one path alone: a dead twin, an entry NCCL skipped (public report)
MGMT_GBIT = 10.0  # the management port (enP7s7): 10 GbE
# What one prompt token's all-reduces move through each rank at TP8: GLM-5 (technical
# report) has 78 layers of hidden size 6,144; each layer all-reduces its attention and
# its MLP output, hidden x 2 bytes (bf16); a ring all-reduce sends 2(N-1)/N of it.
LAYERS, HIDDEN, RANKS = 78, 6144, 8
TOKEN_BYTES = LAYERS * 2 * HIDDEN * 2 * 2 * (RANKS - 1) // RANKS  # 3,354,624
_CX7_NETDEV = re.compile(r"en(P\d+)?p\d+s\d+f\d+np\d+")  # a ConnectX-7 function's netdev


def socket_gbit(ifname: str) -> float:
    """NET/Socket's rate over ifname, at most its link's: a ConnectX-7 function's path, or
    the management port's 10 GbE."""
    return PATH_GBIT if _CX7_NETDEV.fullmatch(ifname or "") else MGMT_GBIT


def socket_ifname(env: Mapping[str, str], interfaces: Mapping[str, list[str]]) -> str:
    """The interface NET/Socket would use: NCCL_SOCKET_IFNAME's first with an IPv4
    address ('' when none)."""
    exclude, exact, entries = transport._nccl_list(env.get("NCCL_SOCKET_IFNAME") or "")
    return next((name for name, found in interfaces.items() if found and not
                 name.startswith("lo") and (not entries or any(
                     transport._matches(e, name, exact) for e in entries) != exclude)), "")


def hop_gbit(mine: Mapping, theirs: Mapping) -> float:
    """The rate of the ring's hop from a rank to the next (each its endpoints: rails
    `used`, `networks`, its NET/Socket interface `socket`): the rails both ends share, or
    NET/Socket when either end has none."""
    rails, peer = transport.rails(mine), [a for _, a in transport.rails(theirs)]
    if not rails or not peer:
        return min(socket_gbit(mine.get("socket", "")), socket_gbit(theirs.get("socket", "")))
    shared = transport.pair_rails(rails, peer, list(mine.get("networks", [])))
    return PORT_GBIT if len(shared) >= 2 else PATH_GBIT


def ring_gbit(endpoints: Mapping[int, Mapping]) -> float:
    """The ring's pace: its slowest hop ({rank: endpoints}, every rank of the group)."""
    ranks = sorted(endpoints)
    if len(ranks) < 2:
        return PORT_GBIT
    return min(hop_gbit(endpoints[r], endpoints[ranks[(i + 1) % len(ranks)]])
               for i, r in enumerate(ranks))


def prefill_s(tokens: int, tokens_per_s: float, gbit: float) -> float:
    """Seconds a prefill of tokens takes on a ring at gbit: the configured rate is the
    rack's on both rails; its all-reduces' share (TOKEN_BYTES a token at PORT_GBIT, at most
    the whole) scales with the ring's pace."""
    if not tokens_per_s:
        return 0.0
    whole = tokens / tokens_per_s
    fabric = min(tokens * TOKEN_BYTES * 8 / (PORT_GBIT * 1e9), whole)
    return whole - fabric + fabric * PORT_GBIT / gbit
