"""Wedged, not dead: what a stall of a serving group is and how it is said (pure). Rank 0's
own metrics decide it (progress.py); the rank to blame is named from its container (paused:
docker says so) or its GPU (culprit.py); a warning says what was seen when the metrics cannot
be read (docs/watchdog.md#wedged-not-dead-stalls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkrack.deployments.ranks import Rank
from sparkrack.watchdog.culprit import Verdict
from sparkrack.watchdog.progress import Reading

ALIKE = {"spinning": "every GPU spinning: a collective every rank waits in, as a fabric or "
                     "NCCL hang leaves it", "idle": "every GPU idle: nothing computes",
         "busy": "every GPU busy at its working power: one step longer than the stall budget "
                 "(a prompt prefilled without chunks?) or a kernel that loops",
         "latched": "every GPU latched in its low-clock state"}
PAUSED = "its container is paused (docker pause: the cgroup freezer)"


@dataclass(frozen=True)
class Stall:
    """A group found stalled, and the evidence that decided."""

    seconds: float  # work pending without progress
    budget_s: float
    reading: Reading  # rank 0's metrics then
    verdict: Verdict  # the GPUs read together
    culprit: Rank | None
    why: str | None = None  # what names the culprit beside the GPUs (its container paused)

    def describe(self) -> str:
        alike = self.verdict.alike
        who = (f"rank {self.culprit.rank} on {self.culprit.node} wedged"
               + (f" ({self.why})" if self.why else "") if self.culprit
               else f"group stalled, no single rank to blame ({ALIKE.get(alike, alike)})"
               if alike else "group stalled, no rank stands out")
        return (f"{who}: {self.reading.describe()}, no token progress for {self.seconds:.0f} s "
                f"(stall budget {self.budget_s:g} s); {self.verdict.evidence}")

    def evidence(self) -> dict:
        """What decided, for the audit record."""
        return {"no_progress_s": round(self.seconds, 1), "stall_budget_s": self.budget_s,
                "running": self.reading.running, "waiting": self.reading.waiting,
                "gpus": dict(self.verdict.classes), "evidence": self.verdict.evidence,
                "alike": self.verdict.alike, "why": self.why,
                "culprit": None if self.culprit is None else {
                    "node": self.culprit.node, "rank": self.culprit.rank}}


def blame(ranks: Sequence[Rank], verdict: Verdict, states: Sequence[Rank]
          ) -> tuple[Rank | None, str | None]:
    """The rank to name and what names it beside the GPUs: the one rank whose container
    is paused (docker says so), else the one whose GPU stands out (None: none does)."""
    paused = [r for r in states if r.status == "paused"]
    if len(paused) == 1:
        return next((r for r in ranks if (r.node, r.name) == (paused[0].node, paused[0].name)),
                    paused[0]), PAUSED
    return next((r for r in ranks if r.node == verdict.culprit), None), None


def unwatched_line(node: str, engine: str, status: int | None, flag: str | None,
                   runs_with_flag: bool | None, timeout_s: float = 2) -> str:
    """What was seen when rank 0's metrics could not be read: no answer within timeout_s,
    or an answer without them. The flag that serves them (flag) is named as the fix only
    where rank 0 does not run with it (runs_with_flag False; None: unknown, not guessed)."""
    if status is None:
        return (f"rank 0 on {node} gave no answer at /metrics within {timeout_s:g} s: its "
                "progress is not read while it does not answer")
    hint = ("" if flag is None or runs_with_flag is None else
            f"; it runs with {flag}" if runs_with_flag else
            f"; {engine} serves them only with {flag}, which rank 0 does not run with (add "
            "it to the profile)")
    return (f"rank 0 on {node} serves no {engine} metrics at /metrics ({status}): a stalled "
            f"group is not seen{hint}")
