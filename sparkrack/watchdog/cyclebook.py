"""The watchdog's record of the power cycles it made, keyed by node, what it holds back now,
and the cycle it has not finished yet (its outlet cut, the group not started again), as
kept in the service's state file across its restarts and its own node's boots
(docs/formats.md#the-watchdogs-state-file). Pure: plain data in and out.
"""

from __future__ import annotations

import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

ENTRIES_KEPT = 5  # per node, newest last: what watch.status shows
OUTCOMES = ("ok", "failed")


@dataclass(frozen=True)
class CycleEntry:
    """One power cycle of a node by the watchdog, finished (ok) or not (failed)."""

    node: str
    cause: str  # why it was cycled (cycling.CAUSES)
    time: float  # when it was decided, wall clock
    outcome: str  # one of OUTCOMES
    line: str  # what happened, one line
    deployment: str = ""  # the group it stopped ("" none ran)
    restarted: str = ""  # the deployment started after it ("" none)

    def describe(self, now: float) -> str:
        """`14:02:31 (6 min ago), GPU latched: ok: <line>`."""
        return f"{when(self.time, now)}, {self.cause}: {self.outcome}: {self.line}"


@dataclass(frozen=True)
class Pending:
    """A cycle whose outlet is about to be cut, or was: what the service needs to finish it
    after its own node's boot (or any restart of the service on the way)."""

    node: str
    cause: str
    token: str  # its audit record's id, which is the rack lock's token
    boot_id: str  # the node's boot id before the cut
    decided: float  # when the cycle was decided (wall clock)
    started: float  # when its audit record started (unix seconds)
    off_seconds: int
    outlet: str  # "PDU:OUTLET", for the audit record
    engine: str = ""  # the group to start again (engine, profile, the stopped deployment)
    profile: str = ""
    deployment: str = ""
    changed: dict = field(default_factory=dict)  # what its audit record noted before the cut

    def describe(self) -> str:
        group = f"; {self.engine} {self.profile} to start again" if self.engine else ""
        return f"{self.node} ({self.cause}), outlet {self.outlet} cut{group}"


@dataclass
class CycleBook:
    """Every node's last cycles, the holds standing now and the unfinished cycle."""

    nodes: dict[str, list[CycleEntry]] = field(default_factory=dict)
    held: dict[str, dict] = field(default_factory=dict)  # "node cause": what and why
    pending: Pending | None = None

    def last(self, node: str) -> CycleEntry | None:
        """The node's latest cycle, if any."""
        entries = self.nodes.get(node)
        return entries[-1] if entries else None

    def add(self, entry: CycleEntry) -> None:
        self.nodes[entry.node] = [*self.nodes.get(entry.node, []), entry][-ENTRIES_KEPT:]

    def hold(self, node: str, cause: str, kind: str, reason: str, now: float) -> bool:
        """Note a hold standing; True when it is new (or its kind changed): say it then."""
        key = f"{node} {cause}"
        before = self.held.get(key)
        if before is not None and before.get("kind") == kind:
            self.held[key] = {**before, "reason": reason}
            return False
        self.held[key] = {"node": node, "cause": cause, "kind": kind, "reason": reason,
                          "since": now}
        return True

    def release(self, standing: set[str]) -> None:
        """Forget the holds whose "node cause" is not in standing any more."""
        self.held = {key: value for key, value in self.held.items() if key in standing}

    def as_dict(self) -> dict:
        return {"nodes": {node: [asdict(e) for e in entries]
                          for node, entries in sorted(self.nodes.items())},
                "held": dict(self.held),
                "pending": asdict(self.pending) if self.pending is not None else None}

    @classmethod
    def from_dict(cls, data: Any) -> CycleBook:
        """The book as_dict() wrote; what does not read as one is left out."""
        if not isinstance(data, dict):
            return cls()
        nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
        book = cls()
        for node, entries in nodes.items():
            for item in entries if isinstance(entries, list) else []:
                entry = _load(CycleEntry, item)
                if entry is not None and entry.node == node:
                    book.add(entry)
        held = data.get("held")
        book.held = {k: v for k, v in held.items() if isinstance(v, dict)} if isinstance(
            held, dict) else {}
        book.pending = _load(Pending, data.get("pending"))
        return book


def _load(kind, item: Any):
    """kind(**item) when item holds kind's fields with their types, else None."""
    if not isinstance(item, dict):
        return None
    types = {"str": str, "float": (int, float), "int": int, "dict": dict}
    values = {}
    for spec in fields(kind):
        if spec.name not in item:
            if spec.default is MISSING and spec.default_factory is MISSING:
                return None
            continue
        value = item[spec.name]
        if isinstance(value, bool) or not isinstance(value, types[spec.type]):
            return None
        values[spec.name] = float(value) if spec.type == "float" else value
    loaded = kind(**values)
    return None if kind is CycleEntry and loaded.outcome not in OUTCOMES else loaded


def when(at: float, now: float) -> str:
    """`2026-12-10 14:02:31 (6 min ago)` in this machine's time zone."""
    ago = max(0.0, now - at)
    since = f"{ago:.0f} s" if ago < 120 else f"{ago / 60:.0f} min" if ago < 7200 else \
        f"{ago / 3600:.1f} h"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(at))} ({since} ago)"
