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

