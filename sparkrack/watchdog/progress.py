"""Progress, not liveness: whether a serving TP group still moves tokens, read from rank 0's
own metrics (pure; the series its engine file names: `serving.metrics`). `StallWatch`
measures how long work has been pending without progress; whether that is a stall is for
the GPUs to say (culprit.py; docs/watchdog.md#wedged-not-dead-stalls).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.deployments.headapi import parse_prometheus
from sparkrack.engines.serving import Metrics


@dataclass(frozen=True)
class Reading:
    """What rank 0's metrics said at one moment."""

    running: float
    waiting: float
    marks: tuple[float, ...]  # the progress series, in the engine file's order (absent: -1)

    @property
    def pending(self) -> bool:
        return self.running > 0 or self.waiting > 0

    def describe(self) -> str:
        return f"{self.running:g} running, {self.waiting:g} waiting"


def reading(metrics: Metrics, text: str) -> Reading | None:
    """The Reading of an engine's /metrics text (metrics: its file's series); None when it
    does not expose the gauges."""
    values = parse_prometheus(text)
    if metrics.running not in values:
        return None
    return Reading(values[metrics.running], values.get(metrics.waiting, 0.0),
                   tuple(values.get(name, -1.0) for name in metrics.progress))


class StallWatch:
    """How long work has been pending on rank 0 without progress, across readings."""

    def __init__(self) -> None:
        self.last: Reading | None = None
        self.since: float | None = None  # when work was last seen pending with these marks
        self.moved = False  # the last reading showed progress of pending work

    def feed(self, now: float, seen: Reading | None) -> float:
        """Seconds without progress while work is pending (0: progress, idle or unknown)."""
        previous, self.last = self.last, seen
        self.moved = (seen is not None and seen.pending and previous is not None
                      and previous.pending and previous.marks != seen.marks)
        if seen is None or not seen.pending:
            self.since = None
            return 0.0
        if previous is None or previous.marks != seen.marks or self.since is None:
            self.since = now
            return 0.0
        return now - self.since
