"""Operator output: rich tables and progress on a terminal, plain text otherwise, JSON on request."""

import json
import re
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any

# rich is imported on first use, not with this module: `invoke --list` and `-h` print no
# table (tests/unit/cli/test_cli_imports.py). `console.out` and `console.err` are its Consoles.
_STREAMS = {"out": False, "err": True}  # name: stderr?
_made = threading.Lock()


COMMAND = {"name": "invoke"}  # the command the operator typed: `sparkrack` sets its own
_TASK_COMMAND = re.compile(r"`invoke (?=[a-z])")


def as_typed(text: str) -> str:
    """text with every "`invoke TASK" naming the command the operator typed instead."""
    name = COMMAND["name"]
    return text if name == "invoke" else _TASK_COMMAND.sub(f"`{name} ", text)


def __getattr__(name: str):
    if name not in _STREAMS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _stream(name)


def _stream(name: str):
    """The rich Console `out` (stdout) or `err` (stderr), made once."""
    console = globals().get(name)
    if console is None:
        with _made:
            console = globals().get(name)
            if console is None:
                from rich.console import Console

                console = globals()[name] = Console(stderr=_STREAMS[name], highlight=False,
                                                    soft_wrap=True)
    return console


def say(message: str) -> None:
    """One line of progress for the operator (stderr, so stdout stays data); what a node
    said in it shows escaped (terminal.escape_controls)."""
    from sparkrack.core.terminal import escape_controls

    _stream("err").print(escape_controls(message), markup=False)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                styles: Sequence[str | None] = (), *, wrap: Sequence[str] | None = None,
                whole: bool = False) -> None:
    """A table: rich when stdout is a terminal, tab-separated plain text when it is not.

    On a terminal: wrap, the compact form, no borders, for a table that must read at 80 to
    100 columns: its other columns are never narrowed, the columns named in wrap fold onto
    more lines when the terminal is too narrow for them, nothing is cut. whole: the table at
    its own width, wider than the terminal if it must be (the terminal wraps its lines)."""
    out = _stream("out")
    rows = [["-" if v is None else str(v) for v in row] for row in rows]
    if not out.is_terminal:
        print("\t".join(columns))
        for row in rows:
            print("\t".join(row))
        return
    from rich.markup import escape
    from rich.table import Table

    if wrap is None:
        table = Table(title=title, title_justify="left")
    else:
        table = Table(title=title, title_justify="left", box=None, pad_edge=False,
                      header_style="bold underline", padding=(0, 2, 0, 0))
    for i, name in enumerate(columns):
        folds = wrap is not None and name in wrap
        widest = max([len(name), *(len(row[i]) for row in rows if i < len(row))])
        table.add_column(name, style=styles[i] if i < len(styles) else None, no_wrap=not folds,
                         overflow="fold" if folds else "ellipsis",
                         min_width=widest if wrap is not None and not folds else None)
    for row in rows:
        table.add_row(*[escape(v) for v in row])
    if whole:  # rich never prints wider than its console: a console as wide as the table
        from rich.console import Console
        from rich.measure import Measurement

        width = Measurement.get(out, out.options.update(max_width=100_000), table).maximum
        out = Console(file=out.file, width=max(width, out.width), force_terminal=True,
                      color_system=out.color_system, highlight=False, soft_wrap=True)
    out.print(table, crop=False)


class Waiting:
    """A live one-line progress display on a terminal (rich), periodic plain lines otherwise."""

    def __init__(self, title: str, every: float = 5.0):
        self.title = title
        self.every = every
        self._last_plain = 0.0
        err = _stream("err")
        self._status = err.status(title) if err.is_terminal else None

    def __enter__(self) -> "Waiting":
        if self._status:
            self._status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._status:
            self._status.__exit__(*exc)

    def update(self, text: str, elapsed: float) -> None:
        """Show the current state of the wait."""
        if self._status:
            from rich.markup import escape

            self._status.update(f"{self.title}: {escape(text)}")
        elif elapsed - self._last_plain >= self.every:
            self._last_plain = elapsed
            say(f"{self.title}: {text}")
