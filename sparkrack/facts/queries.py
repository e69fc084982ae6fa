"""A round trip's questions: queries in, one node script run, answers out.

Every kind of fact adds its own queries (`Query`); `argv(queries)` runs them all on a node
in ONE process of sparkrack/remote/gather.py, and `answer(text, queries)` gives each
query its section's lines for the kind's own parser. What to look at arrives as
positional arguments, never formatted into the script's text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkrack.facts.sections import Sections, split
from sparkrack.fleet.argv import Argv
from sparkrack.remote import script

PYTHON = ("python3", "-I", "-S", "-c")  # isolated, no site: the standard library only


@dataclass(frozen=True)
class Query:
    """One thing to ask a node: its kind, the value it is about, the script's arguments."""

    kind: str
    value: tuple[str, ...] = ()
    args: tuple[str, ...] = field(default=(), compare=False)


def argv(queries: Iterable[Query]) -> Argv:
    """The argv that answers these queries on a node (deduplicated, in order)."""
    args: list[str] = []
    for query in dict.fromkeys(queries):
        args += query.args
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

    def asked(self, kind: str) -> list[Query]:
        """The queries of one kind, in order."""
        return [query for query in self.index if query.kind == kind]


def answer(text: str, queries: Iterable[Query]) -> Answers:
    """The script's output for these queries (as argv() sent them) -> Answers."""
    ordered = list(dict.fromkeys(queries))
    return Answers(split(text), {query: at for at, query in enumerate(ordered)})
