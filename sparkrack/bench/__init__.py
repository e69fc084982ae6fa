"""Lane comparison with the field report's method (`invoke bench`, `invoke bench.compare`).

- prompts.py  the three single-request prompts and the haystack filler (package data in
              prompts/), the needle;
- measure.py  pure arithmetic: decode rate from token timestamps, medians, the 3 % tie;
- metrics.py  the speculative accept length from /metrics (or SGLang's server info);
- target.py   the running deployment from its containers' labels and the `current` record;
- run.py      one run: warm-up, single (median of three), four users, needle, accept length;
- result.py   the result as JSON and as table rows;
- store.py    saved beside the deployment record on the head, and a local copy;
- compare.py  two saved runs side by side, delta per row, ties within 3 %.

`run_bench(inventory, ...)` is the whole of `invoke bench` without the printing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkrack.bench.compare import CompareRow, compare
from sparkrack.bench.result import BenchResult, rows
from sparkrack.bench.run import SUITES, Bench, Suite
from sparkrack.bench.target import NoEngine, Target, find_target
from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory

__all__ = [
    "SUITES",
    "BenchOutcome",
    "BenchResult",
    "CompareRow",
    "NoEngine",
    "Suite",
    "Target",
    "compare",
    "rows",
    "run_bench",
]


@dataclass
class BenchOutcome:
    """What `run_bench` did: the result (partial when stopped), where it was saved, and the
    error that stopped it early (None when it finished or Ctrl-C stopped it)."""

    result: BenchResult
    target: Target
    error: SparkrackError | None = None
    local_path: str | None = None
    remote_path: str | None = None
    save_error: str | None = None

    @property
    def interrupted(self) -> bool:
        return self.result.partial and self.error is None


def run_bench(inventory: Inventory, *, suite: str = "full", name: str | None = None,
              context: int | None = None, max_tokens: int | None = None,
              repeats: int | None = None, save: bool = True,
              on_progress: Callable[[str, float], None] = lambda text, elapsed: None,
              on_event: Callable[[str], None] = lambda line: None) -> BenchOutcome:
    """Find the running deployment, measure it, save the result (also a partial one).

    NoEngine / HeadError / UsageError before anything was measured; afterwards failures
    and Ctrl-C end the run early with result.partial set (see BenchOutcome)."""
    from sparkrack.bench import store
    from sparkrack.core.errors import UsageError

    if suite not in SUITES:
        raise UsageError(f"unknown suite {suite!r}", fix="--suite quick or --suite full")
    if name is not None:
        store.check_name(name)
    with Fleet(inventory) as fleet:
        target, endpoint = find_target(fleet, inventory)
        on_event(f"measuring {target.describe()}")
        bench = Bench(target, endpoint, SUITES[suite], name=name, context=context,
                      max_tokens=max_tokens, repeats=repeats, on_progress=on_progress,
                      on_event=on_event)
        result = bench.run()
        outcome = BenchOutcome(result, target, bench.error)
        if save:
            outcome.local_path = str(store.save_local(inventory, result))
            try:
                outcome.remote_path = store.save_remote(fleet, inventory, result)
            except SparkrackError as exc:
                outcome.save_error = exc.line()
    return outcome
