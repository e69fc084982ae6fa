"""A loaded inventory: typed, frozen nodes sorted by rank, the rack vars, the groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkrack.core.errors import UsageError, did_you_mean
from sparkrack.inventory.schema import RackVars

REHEARSAL_LINK_SCALE = 1000.0  # the rehearsal's links: 200 Mbit/s stands for 200 Gbit/s


@dataclass(frozen=True)
class Node:
    """One node of the rack: how to reach it, its rank and its merged vars."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path | None
    rank: int  # -1 for a spare
    roce_addr: str
    vars: RackVars
    roce_twin_addr: str | None = None  # the cabled port's second path (role fabric)

    @property
    def is_head(self) -> bool:
        """Whether this node is rank 0: it serves HTTP and hosts dist-init."""
        return self.rank == 0


@dataclass(frozen=True)
class Inventory:
    """A validated inventory: nodes sorted by rank, rack vars and group membership."""

    path: Path
    nodes: tuple[Node, ...]
    vars: RackVars
    groups: Mapping[str, tuple[str, ...]]
    spares: tuple[Node, ...] = ()  # hosts with `spare: true`: staged, outside the TP group
    warnings: tuple[str, ...] = ()  # "file:line: key: ..." of legal but unusual values

    @property
    def head(self) -> Node:
        """The rank-0 node."""
        return self.nodes[0]

    @property
    def known_hosts_path(self) -> Path:
        """The known_hosts file, relative paths resolved against the inventory directory."""
        return resolve_path(self.path, self.vars.known_hosts_file)

    @property
    def is_rehearsal(self) -> bool:
        """Whether this inventory describes the local rehearsal rack."""
        return self.vars.rehearsal

    @property
    def link_scale(self) -> float:
        """Link Gbit/s per Gbit/s measured on the fabric: the rehearsal rack's links run at
        1/REHEARSAL_LINK_SCALE of the rate they negotiated (a veth is no 200G link)."""
        return REHEARSAL_LINK_SCALE if self.is_rehearsal else 1.0

    def node(self, name: str) -> Node:
        """The node called name; UsageError naming the known nodes if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        names = [node.name for node in self.nodes]
        raise UsageError(f"unknown node '{name}'{did_you_mean(name, names)}",
                         fix="known nodes: " + ", ".join(names))

    def select(self, limit: str | None) -> tuple[Node, ...]:
        """The nodes named by a --limit value (comma-separated nodes or groups), by rank."""
        if limit is None:
            return self.nodes
        wanted: set[str] = set()
        for entry in filter(None, (part.strip() for part in limit.split(","))):
            wanted.update(self._expand(entry))
        if not wanted:
            raise UsageError("--limit names no node", fix=self._limit_fix())
        return tuple(node for node in self.nodes if node.name in wanted)

    def _expand(self, entry: str) -> tuple[str, ...]:
        """The node names that one --limit entry stands for."""
        names = tuple(node.name for node in self.nodes)
        if entry == "all":
            return names
        if entry in self.groups:
            return self.groups[entry]
        if entry in names:
            return (entry,)
        choices = [*names, *self.groups, "all"]
        raise UsageError(f"unknown node '{entry}' in --limit{did_you_mean(entry, choices)}",
                         fix=self._limit_fix())

    def _limit_fix(self) -> str:
        """The fix listing what --limit accepts."""
        return (f"valid: {', '.join(node.name for node in self.nodes)} "
                f"(or a group: {', '.join([*self.groups, 'all'])})")


def resolve_path(directory: Path, path: str) -> Path:
    """path with ~ expanded; a relative path is taken relative to directory."""
    expanded = Path(path).expanduser()
    return expanded if expanded.is_absolute() else directory / expanded
