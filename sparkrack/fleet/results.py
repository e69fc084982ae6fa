"""Per-node outcomes of a fleet operation and their aggregate: nothing hidden, nothing lost.

Every node targeted by a run, put or get gets exactly one NodeResult: "ok", "failed" (the
node answered but the command or transfer failed or timed out) or "unreachable" (no
session could be had: refused address, connection or host-key failure, dead peer).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sparkrack.core.errors import SparkrackError
from sparkrack.inventory.schema import FrozenMapping

Status = Literal["ok", "failed", "unreachable"]


@dataclass(frozen=True)
class NodeResult:
    """What happened on one node. error is a one-line message naming the node, or None;
    cause, for an unreachable node, the kind of failure naming nothing of it (ssh.cause:
    unreachable, authentication refused, host key unknown, host key changed)."""

    node: str
    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    error: str | None = None
    cause: str | None = None
    files: Mapping[str, bytes] = field(default_factory=lambda: FrozenMapping({}), repr=False)

    @property
    def ok(self) -> bool:
        """Whether the operation succeeded on this node."""
        return self.status == "ok"


@dataclass(frozen=True)
class FleetResult:
    """The NodeResults of one operation in rank order: iterable, indexable by node name."""

    results: tuple[NodeResult, ...]

    def __iter__(self) -> Iterator[NodeResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, node: str) -> NodeResult:
        for result in self.results:
            if result.node == node:
                return result
        raise KeyError(node)

    def __contains__(self, node: object) -> bool:
        return any(result.node == node for result in self.results)

    @property
    def ok(self) -> tuple[NodeResult, ...]:
        """The nodes where the operation succeeded."""
        return self._with("ok")

    @property
    def failed(self) -> tuple[NodeResult, ...]:
        """The nodes that answered but where the operation failed."""
        return self._with("failed")

    @property
    def unreachable(self) -> tuple[NodeResult, ...]:
        """The nodes where no session could be had."""
        return self._with("unreachable")

    @property
    def all_ok(self) -> bool:
        """Whether the operation succeeded on every node."""
        return all(result.ok for result in self.results)

    def summary(self) -> str:
        """One line: counts per status and the names behind each problem, e.g.
        '6 ok, 1 failed (spark-02), 1 unreachable (spark-05)'."""
        parts = [f"{len(self.ok)} ok"]
        for status in ("failed", "unreachable"):
            results = self._with(status)
            if results:
                parts.append(f"{len(results)} {status} ({', '.join(r.node for r in results)})")
        return ", ".join(parts)

    def raise_for_failures(self) -> None:
        """FleetError naming every failed or unreachable node and why, if there is one."""
        if not self.all_ok:
            raise FleetError(self)

    def _with(self, status: Status) -> tuple[NodeResult, ...]:
        """The results with one status."""
        return tuple(result for result in self.results if result.status == status)


class FleetError(SparkrackError):
    """An operation failed on some nodes; carries the whole FleetResult."""

    def __init__(self, result: FleetResult):
        self.result = result
        problems = [r for r in result if not r.ok]
        reasons = "; ".join(r.error or f"{r.node}: {r.status}" for r in problems)
        super().__init__(f"{len(problems)} of {len(result)} nodes not ok: {reasons}")


def last_json_object(text: str) -> dict:
    """The last line of text that is a JSON object (how node-side scripts report), or {}."""
    for line in reversed(text.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return {}
