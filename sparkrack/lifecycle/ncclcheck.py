"""What each rank's NCCL uses, judged against the inventory at every start and roll: a
rank on TCP, or on fewer rails than its node's nccl_ib_hca, fails the start naming the
rank, its node, what it uses against what it should and the fix, unless --allow-degraded
(docs/engines.md#what-nccl-uses). NCCL skips an HCA entry or a port in silence.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sparkrack.inventory import Inventory
from sparkrack.logs.nccluse import NcclUse

ALLOW = "--allow-degraded starts it anyway"


def degraded(inventory: Inventory, uses: Mapping[tuple[int, str], NcclUse]) -> list[str]:
    """One line per rank ({(rank, node): its NcclUse}) whose NCCL runs on less than its
    node's rails, in rank order; a rank that said nothing is not judged here."""
    lines = []
    for (rank, node), use in sorted(uses.items()):
        want = list(inventory.node(node).vars.nccl_ib_hca)
        if not use.said:
            continue
        got = [h.split(":")[0] for h in use.hcas]
        missing = [h for h in want if h not in got]
        where = f"rank {rank} on {node}"
        fix = (f"`invoke run --limit {node} -- ibdev2netdev` shows its HCAs and their ports: "
               f"reseat the cable, or set nccl_ib_hca in host_vars/{node}.yml and `invoke "
               f"provision`; {ALLOW}")
        if use.network == "Socket":
            lines.append(f"{where} runs NCCL over {use.text()} where the inventory gives it "
                         f"NET/IB on {', '.join(want)}: NCCL found none of them with an "
                         f"active port and fell back to TCP without an error; {fix}")
        elif missing:
            lines.append(f"{where} runs NCCL on {len(got)} of {len(want)} rails "
                         f"({use.text()}) where the inventory gives it {', '.join(want)}: "
                         f"NCCL skipped {', '.join(missing)} without an error (no such "
                         f"device, or its port down), about {len(got)}/{len(want)} of the "
                         f"bandwidth; {fix}")
    return lines


def silent(uses: Mapping[tuple[int, str], NcclUse]) -> list[str]:
    """Ranks whose NCCL said nothing of its network (NCCL_DEBUG not INFO in its env)."""
    return [f"rank {rank} on {node}" for (rank, node), use in sorted(uses.items())
            if not use.said]


def record_of(deployment: str, uses: Mapping[tuple[int, str], NcclUse], found: list[str],
              allowed: bool) -> dict:
    """The NCCL record of a start (`invoke status` shows it): each rank's network and
    whether it runs degraded, and whether the start allowed that."""
    degraded_ranks = {int(line.split()[1]) for line in found}
    return {"deployment": deployment, "time": time.time(), "allowed": allowed,
            "ranks": [{"rank": rank, "node": node, "uses": use.text(), "said": use.said,
                       "degraded": rank in degraded_ranks, "network": use.network,
                       "hcas": list(use.hcas)}
                      for (rank, node), use in sorted(uses.items())]}
