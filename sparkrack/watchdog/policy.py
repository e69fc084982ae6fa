"""What the watchdog does with a broken TP group, from the inventory (pure).

`watchdog_action: stop` (the default) stops the group. `watchdog_action: restart` restarts
it in order (the same `up` an operator runs, gates included), at most
`watchdog_restart_budget` times within `watchdog_restart_window_minutes`; once the budget
is spent the group is stopped and the reason says so. Times are wall-clock seconds, so the
budget can be kept across a restart of the service (as_dict / from_dict).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

STOP, RESTART = "stop", "restart"


@dataclass(frozen=True)
class Decision:
    """What to do with a broken group, and why, in one line."""

    action: str  # STOP or RESTART
    reason: str


@dataclass
class RestartBudget:
    """At most `budget` restarts in any `window_s` seconds; `action` is the inventory's."""

    action: str = STOP
    budget: int = 3
    window_s: float = 1800.0
    restarts: list[float] = field(default_factory=list)  # wall-clock times, oldest first

    @classmethod
    def from_vars(cls, rack_vars, restarts: Iterable[float] = ()) -> RestartBudget:
        """The budget the inventory's rack vars set (watchdog_action, _restart_budget,
        _restart_window_minutes), with restarts already made."""
        return cls(action=rack_vars.watchdog_action, budget=rack_vars.watchdog_restart_budget,
                   window_s=rack_vars.watchdog_restart_window_minutes * 60.0,
                   restarts=sorted(restarts))

    def recent(self, now: float) -> list[float]:
        """The restarts inside the window ending now."""
        return [t for t in self.restarts if now - t < self.window_s]

    def decide(self, now: float) -> Decision:
        """Stop or restart a group found broken at `now` (wall clock)."""
        if self.action != RESTART:
            return Decision(STOP, "watchdog_action is stop")
        if self.budget <= 0:
            return Decision(STOP, "watchdog_restart_budget is 0: never restart")
        used = len(self.recent(now))
        minutes = _minutes(self.window_s)
        if used >= self.budget:
            return Decision(STOP, f"restart budget spent: {used} restart"
                            f"{'s' if used != 1 else ''} in the last {minutes} min "
                            f"(watchdog_restart_budget: {self.budget} per {minutes} min); "
                            "stopping the group instead: find the cause, then `invoke up`")
        return Decision(RESTART, f"restart {used + 1} of {self.budget} allowed in {minutes} min")

    def cycle(self, now: float) -> Decision:
        """Whether a latched node may be power-cycled (and its group started again) at now:
        only while the budget, counted whatever watchdog_action says, is not spent."""
        used = len(self.recent(now))
        minutes = _minutes(self.window_s)
        if used >= self.budget:
            return Decision(STOP, f"restart budget spent ({used} of {self.budget} in "
                            f"{minutes} min): not power-cycled; `invoke power-cycle -n NODE`")
        return Decision(RESTART, f"power cycle and restart {used + 1} of {self.budget} allowed "
                        f"in {minutes} min")

    def record(self, now: float) -> None:
        """Count a restart made (or tried) at now; forget those out of the window."""
        self.restarts = [*self.recent(now), now]

    def as_dict(self) -> dict:
        """The restarts made, to keep across a restart of the service."""
        return {"restarts": list(self.restarts)}

    def load(self, data: dict, now: float) -> None:
        """Take the restarts of as_dict() that are still inside the window."""
        times = data.get("restarts", []) if isinstance(data, dict) else []
        self.restarts = sorted(t for t in times if isinstance(t, (int, float))
                               and 0 <= now - t < self.window_s)


def _minutes(seconds: float) -> str:
    """A window in minutes as the inventory wrote it: 30, or 7.5."""
    minutes = seconds / 60.0
    return f"{minutes:g}"
