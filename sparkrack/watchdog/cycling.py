"""When the watchdog may power-cycle a node (pure; docs/watchdog.md#power-cycles-that-do-not-flap).

A node is cycled for a cause only when the cause was seen in `samples` consecutive polls
with nothing explaining it otherwise (a GPU slowing itself for heat), the watchdog was
installed with --allow-power-cycle, no cycle is unfinished, the node was not cycled within
the window, the restart budget allows it, and the cycle can be finished (cycle_refusal).
Anything held back says why in one line. A cause is what makes a node want its power
removed: `latched` (gpuwatch.py) or `wedged` (silence.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparkrack.watchdog.cyclebook import CycleBook, when
from sparkrack.watchdog.policy import RESTART, Decision

CYCLE, WAIT, HOLD, NONE = "cycle", "wait", "hold", "none"
HOLDS = ("pending", "window", "budget", "refused")  # why a cycle is held back
CAUSES = {"latched": "GPU latched in its low-clock state",  # cause: what an operator reads
          "wedged": "host wedged (SSH unanswered, its kernel and outlet alive)"}
# Consecutive polls a cause needs when not watchdog_power_cycle_samples. A wedged host's
# every poll waits out its SSH liveness timeout (5 s) and sshd's greeting (3 s), 20-25 s a
# poll with the facts' timeouts: two are 30-50 s of silence, not a passing stall, where
# five would leave the rack down two minutes before anything is done.
CAUSE_SAMPLES = {"wedged": 2}


@dataclass(frozen=True)
class Sighting:
    """One poll's word on one node and cause: seen or not, and what explains it instead."""

    node: str
    cause: str
    seen: bool
    excuse: str | None = None  # e.g. "its SW thermal slowdown at 95 C": never cycled for it


@dataclass(frozen=True)
class CycleRules:
    """What the inventory and the install allow."""

    allowed: bool  # watch.install --allow-power-cycle
    samples: int  # watchdog_power_cycle_samples
    window_s: float  # watchdog_power_cycle_window_minutes, in seconds

    @classmethod
    def from_vars(cls, rack_vars, allowed: bool) -> CycleRules:
        return cls(allowed, rack_vars.watchdog_power_cycle_samples,
                   rack_vars.watchdog_power_cycle_window_minutes * 60.0)


@dataclass(frozen=True)
class Verdict:
    """What to do about one node's cause now, and why, in one line."""

    action: str  # CYCLE, WAIT, HOLD or NONE
    node: str
    cause: str
    reason: str
    held: str = ""  # for HOLD: one of HOLDS


class Streaks:
    """How many consecutive polls saw each (node, cause), nothing excusing it."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def see(self, sightings: Iterable[Sighting]) -> dict[tuple[str, str], int]:
        """Count this poll in: a sighting seen and not excused adds one, anything else (not
        seen, excused, absent from this poll) starts over."""
        self.counts = {(s.node, s.cause): self.counts.get((s.node, s.cause), 0) + 1
                       for s in sightings if s.seen and s.excuse is None}
        return dict(self.counts)


def decide(sighting: Sighting, streak: int, rules: CycleRules, book: CycleBook, now: float,
           budget: Decision, refusal: str | None = None) -> Verdict:
    """The verdict on one sighting after streak consecutive polls (Streaks.see); budget:
    RestartBudget.cycle(now); refusal: cycle_refusal's, for this node."""
    node, cause = sighting.node, sighting.cause
    what = f"{node}: {CAUSES.get(cause, cause)}"
    if not sighting.seen:
        return Verdict(NONE, node, cause, "")
    if sighting.excuse is not None:
        return Verdict(NONE, node, cause, f"{what}? no: {sighting.excuse} explains the low "
                       "clock; not power-cycled")
    if not rules.allowed:
        return Verdict(NONE, node, cause, f"{what}; not power-cycled (installed without "
                       f"--allow-power-cycle): `invoke power-cycle -n {node}`")
    if streak < (needed := samples_for(cause, rules)):
        return Verdict(WAIT, node, cause, f"{what} in {streak} of the {needed} consecutive "
                       f"polls a power cycle needs ({_samples_source(cause)})")
    held = f"{what} for {streak} polls; power cycle held back: "
    if book.pending is not None:
        return Verdict(HOLD, node, cause, held + "the power cycle of "
                       f"{book.pending.describe()} is not finished", "pending")
    last = book.last(node)
    if last is not None and now - last.time < rules.window_s:
        minutes = f"{rules.window_s / 60:g}"
        return Verdict(HOLD, node, cause, held + f"power-cycled {when(last.time, now)} "
                       f"({last.cause}, {last.outcome}): at most one cycle per node in "
                       f"{minutes} min (watchdog_power_cycle_window_minutes); once its cause "
                       f"is found: `invoke power-cycle -n {node}`", "window")
    if budget.action != RESTART:
        return Verdict(HOLD, node, cause, held + budget.reason, "budget")
    if refusal is not None:
        return Verdict(HOLD, node, cause, held + refusal, "refused")
    return Verdict(CYCLE, node, cause, f"{what} for {streak} consecutive polls; "
                   f"{budget.reason}")


def samples_for(cause: str, rules: CycleRules) -> int:
    """The consecutive polls a power cycle for cause needs."""
    return CAUSE_SAMPLES.get(cause, rules.samples)


def _samples_source(cause: str) -> str:
    return "a wedged host's" if cause in CAUSE_SAMPLES else "watchdog_power_cycle_samples"


def cycle_refusal(node: str, own: str | None, keeps: str | None,
                  fed: bool = True) -> str | None:
    """Why a cycle of node could not be made or finished safely (None: it can). own: the
    node the watchdog runs on (None: not known); keeps: why this service would not come
    back after its own node's boot to finish it (None: it would); fed: a PDU outlet feeds
    node in the inventory. A cycle of the head is finished by a watchdog elsewhere in the
    same process (the lock leased on the head meanwhile), and by one on the head after the
    boot, as its own node."""
    if not fed:
        return f"no PDU outlet feeds {node} in the inventory (pdu: outlets)"
    if own is None:
        return (f"this watchdog does not know which node it runs on (no --node): a cycle of "
                f"{node} could cut its own power with nothing to finish it; run "
                "`invoke watch.install` again")
    if node == own and keeps is not None:
        return (f"{node} is the watchdog's own node and {keeps}: the group would not be "
                "started again after the boot")
    return None
