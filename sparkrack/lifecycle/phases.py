"""Wall seconds of each phase of an engine start, for `up --json` and the deployment record.

    phases = Phases()
    with phases.timed("gates"):
        ...
    phases.as_dict()   # {"gates": 0.41, ..., "total": 6.2}

Phases may overlap (`up` prepares while the burn runs), so their sum can exceed the total; a phase timed twice (a restore after a failed roll) adds up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# what each phase is, in the order a start goes through them (docs and `up --json`)
MEANING = {
    "gates": "reachability, env files, other engines, rules, image IDs, memory",
    "fabric": "with --fabric-check: a full-size frame and a burst on every rail",
    "burn": "the clock cap under load (the burn gate), and the power projection",
    "prepare": "an earlier failed start's leftovers removed, docker limits probed (up: while "
               "the burn runs)",
    "create": "the containers created (not started)",
    "stop_old": "roll: the old deployment stopped in order, memory recovered",
    "start": "the containers started in order (workers, then rank 0)",
    "ready": "first start to rank 0 healthy: the engine's own load, plus polling",
    "smoke": "one chat completion through rank 0",
}


class Phases:
    """Seconds per named phase since the start was asked for (thread-safe)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the wall time of the block to phase name (also when it raises)."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - began)

    def add(self, name: str, seconds: float) -> None:
        """Add seconds to phase name."""
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def as_dict(self) -> dict[str, float]:
        """{phase: seconds, ..., "total": seconds since the start}, rounded to ms."""
        with self._lock:
            done = {name: round(value, 3) for name, value in self.seconds.items()}
        return {**done, "total": round(time.monotonic() - self.started, 3)}
