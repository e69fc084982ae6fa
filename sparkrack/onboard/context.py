"""What every onboarding step works on: the report, the new node, the fleet, the options.

A step (trust.run, baseline.run, ...) opens its report entry with `ctx.step(name)`, adds
lines with `ctx.line`, sets its verdict with `ctx.set`, or ends the onboarding with
`ctx.stop` (raises Stop: the sequencer, run.py, skips the later steps). A SparkrackError
inside a step fails that step with the error's line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.onboard.outcomes import (
    Difference,
    Facts,
    ImageOutcome,
    JoinPlan,
    VerifyReport,
)
from sparkrack.transfer.chain import DEFAULT_PYTHON, Progress

if TYPE_CHECKING:
    from sparkrack.transfer.weights import StageReport

STEPS = ("trust", "baseline", "provision", "stage", "verify", "join")

Event = Callable[[str, "Step", str], None]  # (start | line | end, step, text)


@dataclass
class Step:
    """One step's entry in the report."""

    number: int
    name: str
    verdict: str = "pending"  # ok | changed | would | refused | failed | skipped | pending
    summary: str = ""
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        return self.verdict in ("refused", "failed")


@dataclass
class OnboardReport:
    """What an onboarding did: every step's verdict and what the steps learnt."""

    name: str
    address: str
    replace: str | None
    check: bool
    steps: list[Step] = field(default_factory=lambda: [Step(i + 1, n) for i, n in enumerate(STEPS)])
    fingerprint: str = ""
    roce_addr: str | None = None
    roce_twin_addr: str | None = None
    differences: list[Difference] = field(default_factory=list)
    facts: dict[str, Facts] = field(default_factory=dict)
    provision: object | None = None
    images: list[ImageOutcome] = field(default_factory=list)
    weights: StageReport | None = None
    verify: VerifyReport | None = None
    join: JoinPlan | None = None
    rank: int | None = None
    joined: bool = False
    message: str = ""

    def step(self, name: str) -> Step:
        return self.steps[STEPS.index(name)]

    @property
    def exit_code(self) -> int:
        return 1 if any(s.bad for s in self.steps) else 0


@dataclass(frozen=True)
class Options:
    """The operator's choices (see `onboard`)."""

    fingerprint: str | None = None
    confirm: Callable[[str], bool] | None = None
    assume_yes: bool = False
    waivers: Mapping[str, str] = field(default_factory=dict)
    peer: str | None = None
    burn_seconds: float = 5.0
    bwlimit: float | None = None
    full_verify: bool = False
    python: str = DEFAULT_PYTHON
    on_progress: Progress | None = None  # the image and weight copies as they go


class Stop(Exception):
    """A step refused or failed: later steps are skipped."""


@dataclass
class Context:
    """One onboarding's state between the steps. `work` is the scratch inventory that
    already holds `new` (scratch.build), `fleet` a fleet over it, `members` the rack's
    other nodes; `known_hosts` the scratch known_hosts that fleet trusts."""

    inventory: Inventory
    report: OnboardReport
    options: Options
    emit: Event
    scratch: Path
    old: Node | None = None  # the member --replace retires
    roce_addr: str | None = None  # --roce-addr, or what step 2 found
    roce_twin_addr: str | None = None  # --roce-twin-addr, or what step 2 found
    work: Inventory | None = None
    new: Node | None = None
    members: tuple[Node, ...] = ()
    fleet: Fleet | None = None

    @property
    def known_hosts(self) -> Path:
        return self.scratch / "known_hosts"

    @property
    def check(self) -> bool:
        return self.report.check

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.close()
            self.fleet = None

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Time the named step and announce it; a SparkrackError fails it; a bad verdict
        stops the onboarding."""
        step = self.report.step(name)
        started = time.monotonic()
        self.emit("start", step, "")
        try:
            yield step
        except Stop:
            step.seconds = time.monotonic() - started
            self.emit("end", step, "")
            raise
        except SparkrackError as error:
            self.set(step, "failed", error.line())
        step.seconds = time.monotonic() - started
        self.emit("end", step, "")
        if step.bad:
            raise Stop()

    def line(self, step: Step, text: str) -> None:
        """A detail line of step, shown as it comes."""
        step.details.append(text)
        self.emit("line", step, text)

    def set(self, step: Step, verdict: str, summary: str) -> None:
        """step's verdict and one-line summary."""
        step.verdict, step.summary = verdict, summary

    def stop(self, step: Step, verdict: str, summary: str) -> None:
        """End the onboarding at step with verdict (refused or failed)."""
        self.set(step, verdict, summary)
        raise Stop()
