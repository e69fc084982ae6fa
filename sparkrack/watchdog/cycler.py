"""The service's side of its power cycles: each guarded poll's sightings counted, the
decision made for each (cycling.py), what is held back said once while it stands, and the
book of cycles (cyclebook.py) kept in the state file: its holds, its cycles by node, the
cycle not finished yet (docs/watchdog.md#power-cycles-that-do-not-flap).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkrack.watchdog.cyclebook import CycleBook, CycleEntry
from sparkrack.watchdog.cycling import (
    CYCLE,
    HOLD,
    CycleRules,
    Sighting,
    Streaks,
    Verdict,
    cycle_refusal,
    decide,
    samples_for,
)
from sparkrack.watchdog.policy import Decision
from sparkrack.watchdog.silence import WEDGED


def sightings(poll: Any) -> list[Sighting]:
    """A guarded poll's causes, node by node: a GPU found latched, or a busy low clock that
    its heat explains (gpuwatch: an overheating finding with an excuse); a lost node judged
    wedged (silence.py)."""
    found = [Sighting(s.node, "wedged", True) for s in poll.silences
             if s.kind == WEDGED]
    for finding in poll.findings:
        if finding.kind == "latched":
            found.append(Sighting(finding.node, "latched", True))
        elif finding.evidence.get("excuse"):
            found.append(Sighting(finding.node, "latched", True, finding.evidence["excuse"]))
    return found


class Cycler:
    """Which node to power-cycle now, and what is held back."""

    def __init__(self, rules: CycleRules, own: str | None,
                 keeps: Callable[[], str | None] = lambda: None,
                 fed: Callable[[str], bool] = lambda node: True):
        self.rules = rules
        self.own = own  # the node this service runs on (None: not known)
        self.keeps = keeps  # why it would not finish a cycle of its own node (nodecycle)
        self.fed = fed  # whether a PDU outlet feeds a node (the inventory's pdu:)
        self.book = CycleBook()
        self.streaks = Streaks()

    def consider(self, poll: Any, now: float, budget: Decision) -> tuple[Verdict | None,
                                                                          list[Verdict]]:
        """The cycle to make now (the first node by name), and the holds that begin now
        (each said once while it stands; the book keeps every standing one)."""
        seen = sightings(poll)
        counts = self.streaks.see(seen)
        chosen, new, standing = None, [], set()
        for sighting in sorted(seen, key=lambda s: (s.node, s.cause)):
            streak = counts.get((sighting.node, sighting.cause), 0)
            refusal = None
            if streak >= samples_for(sighting.cause, self.rules):
                refusal = cycle_refusal(sighting.node, self.own,
                                        self.keeps() if sighting.node == self.own else None,
                                        self.fed(sighting.node))
            verdict = decide(sighting, streak, self.rules, self.book, now, budget, refusal)
            if verdict.action == HOLD:
                standing.add(f"{verdict.node} {verdict.cause}")
                if self.book.hold(verdict.node, verdict.cause, verdict.held, verdict.reason,
                                  now):
                    new.append(verdict)
            elif verdict.action == CYCLE and chosen is None:
                chosen = verdict
        self.book.release(standing)
        return chosen, new

    def record(self, node: str, cause: str, decided: float, deployment: str, ok: bool,
               line: str, restarted: str = "") -> None:
        """A cycle done (or failed): in the book, its pending restart forgotten, its streak
        started over."""
        self.book.pending = None
        self.book.add(CycleEntry(node, cause, decided, "ok" if ok else "failed", line,
                                 deployment, restarted))
        self.streaks.counts.pop((node, cause), None)
