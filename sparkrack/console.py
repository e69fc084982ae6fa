"""Operator output: rich tables and progress on a terminal, plain text otherwise, JSON on request."""

import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(message: str) -> None:
    """One line of progress for the operator (stderr, so stdout stays data)."""
    err.print(message, markup=False)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                styles: Sequence[str | None] = ()) -> None:
    """A table: rich when stdout is a terminal, tab-separated plain text when it is not."""
    rows = [["-" if v is None else str(v) for v in row] for row in rows]
    if not out.is_terminal:
        print("\t".join(columns))
        for row in rows:
            print("\t".join(row))
        return
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, style=styles[i] if i < len(styles) else None, no_wrap=True)
    for row in rows:
        table.add_row(*[escape(v) for v in row])
    out.print(table)



class Waiting:
    """A live one-line progress display on a terminal (rich), periodic plain lines otherwise."""

    def __init__(self, title: str, every: float = 5.0):
        self.title = title
        self.every = every
        self._last_plain = 0.0
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
            self._status.update(f"{self.title}: {escape(text)}")
        elif elapsed - self._last_plain >= self.every:
            self._last_plain = elapsed
            say(f"{self.title}: {text}")
