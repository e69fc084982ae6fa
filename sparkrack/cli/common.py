"""What every task shares: operator errors as one line and an exit code, inventory choice,
and for the tasks that change the rack, the rack lock and the audit record (rack_task).

The task modules import only this, errors and console at the top: anything heavier (docker,
paramiko, fabric, jinja2, rich, yaml and the modules using them) is imported inside the task
body that uses it, so `invoke --list` and `-h` stay fast (tests/unit/cli/test_cli_imports.py)."""

from __future__ import annotations

import functools
import inspect
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

from invoke.exceptions import Exit

from sparkrack.core.errors import SparkrackError, UsageError

if TYPE_CHECKING:
    from sparkrack.inventory import Inventory

INVENTORY_HELP = "inventory directory (default: $SPARKRACK_INVENTORY, else ./inventory/rack)"
RAW_HELP = ("show what the nodes printed as it is: control characters (escape sequences) "
            "go to the terminal unescaped; default: shown as \\x1b, tab and newline kept")
WAIT_HELP = {"wait": "if another operator holds the rack lock, wait up to SECONDS for it "
                     "(default: refuse at once with exit code 3)"}


def operator_task(body):
    """Wrap a task body: a SparkrackError becomes `error: ...` and its exit code, no traceback;
    Ctrl-C becomes exit 130 after the body's own cleanup ran. Any other exception is a bug
    or an unforeseen failure: one line and exit 1 (SPARKRACK_DEBUG=1 shows the traceback)."""

    @functools.wraps(body)
    def run(*args, **kwargs):
        from sparkrack.core.console import as_typed, say
        from sparkrack.core.events import on_node_lost
        from sparkrack.core.terminal import escape_controls

        on_node_lost(say)  # a node lost mid-command is named at once
        try:
            _refuse_help_as_a_value(body, args, kwargs)
            return body(*args, **kwargs)
        except SparkrackError as exc:  # its line may quote a node: escaped
            raise _closing(f"error: {escape_controls(as_typed(exc.line()))}",
                           exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None
        except Exit as exc:
            if isinstance(exc.message, str) and exc.message:
                raise _closing(exc.message, exc.code) from None
            raise
        except Exception as exc:
            if os.environ.get("SPARKRACK_DEBUG"):
                raise
            first = escape_controls((str(exc).splitlines() or [""])[0][:300])
            raise _closing(f"error: unexpected {type(exc).__name__}: {first} (SPARKRACK_DEBUG=1 "
                           "shows the traceback)", 1) from None

    return run


def _closing(line: str, code: int) -> Exit:
    """The Exit invoke prints the task's closing line from (on stderr): on a terminal, broken
    at spaces to its width, where the terminal would cut a word (core/terminal.py)."""
    import sys

    from sparkrack.core.terminal import for_terminal

    return Exit(for_terminal(line, sys.stderr), code=code)


def _refuse_help_as_a_value(body, args: tuple, kwargs: dict) -> None:
    """invoke reads `invoke up --help` as up's ENGINE being `--help` (a positional argument
    takes the next word): say so and how to get the help, before anything runs."""
    for value in (*args[1:], *kwargs.values()):
        if value in ("--help", "-h"):
            task = body.__name__.replace("_", "-")
            raise UsageError(f"{value} was read as an argument's value, not as a request for "
                             "help", fix=f"invoke -h {task} shows the task's help")


def rack_task(changing=True, name: str | None = None, headless=None, before=None):
    """operator_task for a task that may change the rack: when changing (a bool, or a
    predicate of the task's arguments: `lambda a: not a["check"]`) it runs holding the rack
    lock, inside an audit record (sparkrack.oplock). Adds the `wait` argument (--wait
    SECONDS; give WAIT_HELP to @task). Another holder: one line, exit code 3. SIGTERM and
    SIGHUP stop the task as Ctrl-C does, so its cleanup runs and its record says
    "interrupted". name: the task as the lock and the audit log show it (default: the
    function's name, `_` as `-`; a task in a collection gives its dotted name). headless:
    a predicate of the arguments and the inventory under which the task runs without the
    lock when the head does not answer (`onboard --replace` of the head: no lock can be
    taken on a head that is gone; see oplock.guard). before(arguments, inventory): a check
    of the operator's input run before the lock is taken, so a refusal contacts nothing."""

    def wrap(body):
        task_name = name or body.__name__.replace("_", "-")
        signature = inspect.signature(body)
        signature = signature.replace(parameters=[*signature.parameters.values(), inspect.Parameter(
            "wait", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)])

        @functools.wraps(body)
        def run(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            wait = arguments.pop("wait")
            if not (changing(arguments) if callable(changing) else changing):
                return body(**arguments)
            return _guarded(task_name, arguments, float(wait) if wait not in (None, "") else None,
                            lambda: body(**arguments), headless, before)

        run.__signature__ = signature
        return operator_task(run)

    return wrap


def _guarded(task: str, arguments: dict, wait: float | None, call, headless=None,
             before=None):
    """call() holding the rack lock (or headless, see rack_task), inside an audit record;
    the outcome recorded. before(arguments, rack) runs first, holding nothing."""
    from sparkrack.core import signals
    from sparkrack.core.console import say
    from sparkrack.oplock import audit
    from sparkrack.oplock.guard import Guard

    path = arguments.get("inventory")
    rack = inventory_from(path)
    if before is not None:
        before(arguments, rack)
    args = {k: v for k, v in arguments.items() if k != "c"}
    guard = Guard(rack, task, args, on_event=say)
    # Ctrl-C while it waits for the lock leaves nothing taken
    guard.begin(wait, headless=bool(headless and headless(arguments, rack)))
    outcome, error, code = "failed", None, 1
    try:
        with _preloaded(path, rack), audit.active(guard.record), signals.interrupting():
            result = call()
        outcome, code = "ok", 0
        return result
    except KeyboardInterrupt:
        outcome, code = "interrupted", 130
        if guard.lost:
            error = f"lost the rack lock: {guard.lost}"
            raise SparkrackError(f"{task} stopped: {error}",
                                 fix="see `invoke lock` and `invoke log`") from None
        error = "interrupted (Ctrl-C or a signal)"
        raise
    except Exit as exc:
        code = exc.code or 0
        outcome = "ok" if not code else "refused" if code == 3 else "failed"
        error = str(exc.message) if exc.message else None
        raise
    except SparkrackError as exc:
        outcome = getattr(exc, "outcome", "refused" if isinstance(exc, UsageError) else "failed")
        code, error = exc.exit_code, exc.line()
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with signals.held() as late:  # the record and the release are never cut short
            guard.end(outcome, error=error, exit_code=code)
        if late:
            say(f"{late[0]} arrived as {task} ended: its outcome ({outcome}) stands, recorded "
                "and the lock released")


_loaded: dict = {}


@contextmanager
def _preloaded(path: str | None, rack: Inventory):
    """inventory_from(path) returns rack during the block (loaded once per task)."""
    _loaded[path] = rack
    try:
        yield
    finally:
        _loaded.pop(path, None)


_warned: set[str] = set()


def inventory_from(path: str | None) -> Inventory:
    """Load the inventory named by -i, $SPARKRACK_INVENTORY or ./inventory/rack; each of
    its warnings (a legal but unusual value) is said once, as one line."""
    from sparkrack.core.console import say
    from sparkrack.inventory import load_inventory

    if path in _loaded:
        return _loaded[path]
    rack = load_inventory(path or os.environ.get("SPARKRACK_INVENTORY") or None)
    for warning in rack.warnings:
        if warning not in _warned:
            _warned.add(warning)
            say(f"warning: {warning}")
    return rack
