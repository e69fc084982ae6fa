"""A round trip's questions: each kind of fact defined once, queries in, one node script run,
answers out (docs/internals.md#facts).

A `Fact` is one kind, as pyinfra's FactBase keeps one: the node-side function that answers
it (in sparkrack/remote/, found by its name in gather.py's SECTIONS) and the parser of its
lines, side by side; it registers itself in KINDS. A `Query` asks one fact about one value;
`argv(queries)` runs them all on a node in ONE process of sparkrack/remote/gather.py, and
`answer(text, queries)` gives each query its parsed answer (`Answers.get`). What to look at
arrives as positional arguments (JSON), never formatted into the script's text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkrack.facts.sections import Sections, split
from sparkrack.fleet.argv import Argv
from sparkrack.remote import script

PYTHON = ("python3", "-I", "-S", "-c")  # isolated, no site: the standard library only
KINDS: dict[str, Fact] = {}  # every kind of fact, by the name of its node-side function


class Fact:
    """One kind of fact: `section`, the node-side function that answers it (its name is the
    kind's, on the wire and in KINDS), and `parse`, its answer's lines -> the fact."""

    def __init__(self, section: Callable[..., list[str]], parse: Callable[[list[str]], Any]):
        self.section, self.parse, self.name = section, parse, section.__name__
        if self.name in KINDS:
            raise ValueError(f"two kinds of fact are answered by {self.name}")
        KINDS[self.name] = self

    def __repr__(self) -> str:
        return f"Fact({self.name})"

    def query(self, *args: Any, value: tuple[str, ...] = ()) -> Query:
        """Ask this fact: args go to the node-side function, value names what it is about
        (two queries of a kind with the same value are one)."""
        return Query(self, value, json.dumps(args))

    def read(self, lines: list[str], query: Query) -> Any:
        """The fact from the lines answering query."""
        return self.parse(lines)


@dataclass(frozen=True)
class Query:
    """One thing to ask a node: its kind, the value it is about, the function's arguments."""

    kind: Fact
    value: tuple[str, ...] = ()
    args: str = field(default="[]", compare=False)  # JSON


def argv(queries: Iterable[Query]) -> Argv:
    """The argv that answers these queries on a node (deduplicated, in order)."""
    args: list[str] = []
    for query in dict.fromkeys(queries):
        args += (query.kind.name, query.args)
    return [*PYTHON, script("gather"), *args]


@dataclass(frozen=True)
class Answers:
    """One node's answers to one round trip's queries."""

    sections: Sections
    index: dict[Query, int]

    @property
    def boot_id(self) -> str:
        return self.sections.boot_id

    @property
    def now(self) -> str:
        return self.sections.now

    def lines(self, query: Query) -> list[str]:
        """The lines answering query (none when it was not asked or not answered)."""
        at = self.index.get(query)
        return [] if at is None else self.sections.answers.get(at, [])

    def get(self, query: Query) -> Any:
        """query's fact, parsed by its kind (from no lines when it was not asked)."""
        return query.kind.read(self.lines(query), query)

    def found(self, query: Query, default: Any = None) -> Any:
        """query's fact, or default when it was not asked."""
        return self.get(query) if query in self.index else default

    def asked(self, kind: Fact) -> list[Query]:
        """The queries of one kind, in order."""
        return [query for query in self.index if query.kind is kind]

    def each(self, kind: Fact) -> dict[tuple[str, ...], Any]:
        """{value: fact} of the queries of one kind, in order."""
        return {query.value: self.get(query) for query in self.asked(kind)}


def answer(text: str, queries: Iterable[Query]) -> Answers:
    """The script's output for these queries (as argv() sent them) -> Answers."""
    ordered = list(dict.fromkeys(queries))
    return Answers(split(text), {query: at for at, query in enumerate(ordered)})
