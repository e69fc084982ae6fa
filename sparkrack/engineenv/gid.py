"""Which NCCL_IB_GID_INDEX a node's ranks use, and why: a node's own, the rack's, or the
one its GID table holds its fabric addresses at (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkrack.facts.roce import RoceFacts, node_fabric, wanted_gids
from sparkrack.inventory import Node

OWN = "host_vars nccl_ib_gid_index (this node's own)"
NOT_PROBED = "inventory nccl_ib_gid_index (nccl_ib_gid_probe: false)"
NOT_READ = "inventory nccl_ib_gid_index (provision writes the index probed on the node)"


@dataclass(frozen=True)
class GidIndex:
    """The index, its source (one line), whether it was read from the node's GID table,
    and, when the HCAs carry their fabric addresses at different indexes and nothing else
    decides, each HCA's index (the role refuses the node)."""

    index: int
    source: str
    probed: bool = False
    conflict: Mapping[str, int | None] = field(default_factory=dict)


def gid_index(node: Node, rack_index: int, roce: RoceFacts | None) -> GidIndex:
    """node's GID index and its source; roce is the node's table as gathered (None: the
    inventory's view, no node read). In order: a node's own nccl_ib_gid_index (one that
    differs from the rack's); the rack's when nccl_ib_gid_probe is false or no table was
    read; the index at which every HCA's table carries its function's fabric address
    (choose_gid: by address, not position); else the rack's as the fallback, naming what
    the tables lack and the other addresses they hold."""
    own = node.vars.nccl_ib_gid_index
    if own != rack_index:
        return GidIndex(own, OWN)
    if not node.vars.nccl_ib_gid_probe:
        return GidIndex(own, NOT_PROBED)
    if roce is None:
        return GidIndex(own, NOT_READ)
    wanted = wanted_gids(node_fabric(node))
    choice = roce.choose(wanted)
    if choice.index is not None:
        return GidIndex(choice.index, "probed on the node (the RoCE v2 entry of "
                        f"{', '.join(wanted.values())})", probed=True)
    lacking = ", ".join(choice.missing) or "a fabric address"
    return GidIndex(own, f"inventory nccl_ib_gid_index (fallback: no RoCE v2 GID of {lacking})"
                    f"{choice.others_text}",
                    conflict={} if choice.others or not choice.conflict else choice.indexes)
