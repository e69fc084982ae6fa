"""The one section format of everything a node script prints, and its one parser.

    @@base            the node's boot id, then its clock (seconds.nanoseconds)
    @@<index> <kind>  the answer to the index-th query of the round trip, one line each
                      (provisioning's command sequence: the index-th command, failed)

A section names its query by index, never by a value the script was given (a path, a unit
name), so no value can forge a section; a line of a body that looks like a header but is
not `@@<digits> ...` or `@@base` stays in the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sections:
    """The base section's lines and {query index: lines} of one script output."""

    base: tuple[str, ...] = ()
    answers: dict[int, list[str]] = field(default_factory=dict)

    @property
    def boot_id(self) -> str:
        return self.base[0].strip() if self.base else ""

    @property
    def now(self) -> str:
        """The node's clock when it answered (seconds.nanoseconds, as printed)."""
        return self.base[1].strip() if len(self.base) > 1 else ""


def split(text: str) -> Sections:
    """A script's output -> Sections (lines before the first header are dropped)."""
    base: list[str] = []
    answers: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line == "@@base":
            current = base
            continue
        if line.startswith("@@") and " " in line:
            head = line[2:].split(" ", 1)[0]
            if head.isdigit():
                current = answers.setdefault(int(head), [])
                continue
        if current is not None:
            current.append(line)
    return Sections(tuple(base), answers)
