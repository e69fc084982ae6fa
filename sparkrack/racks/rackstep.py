"""One rack's part of a fleet task: its own rack lock held and its own audit record open
while sparkrack works on it, as `invoke up` on that rack would (docs/fleet.md#rolling)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sparkrack.core import signals
from sparkrack.core.errors import SparkrackError
from sparkrack.inventory import Inventory
from sparkrack.oplock import audit
from sparkrack.oplock.guard import Guard


@contextmanager
def on_rack(inventory: Inventory, task: str, args: dict, *, wait: float | None = None,
            on_event: Callable[[str], None] = lambda e: None) -> Iterator[None]:
    """The block holding inventory's rack lock, inside an audit record of task on that rack
    (its outcome: ok, failed or interrupted, with the error)."""
    guard = Guard(inventory, task, args, on_event=on_event)
    guard.begin(wait)
    outcome, error, code = "failed", None, 1
    try:
        with audit.active(guard.record):
            yield
        outcome, code = "ok", 0
    except KeyboardInterrupt:
        outcome, error, code = "interrupted", "interrupted (Ctrl-C or a signal)", 130
        raise
    except SparkrackError as exc:
        error, code = exc.line(), exc.exit_code
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with signals.held():
            guard.end(outcome, error=error, exit_code=code)
