"""The README as a newcomer reads it: its task table names every task `invoke --list` shows,
the word "lane" is defined where it is first used, and the quick start says which Debian
packages the rehearsal and the test suite install as root."""

from __future__ import annotations

import re
from pathlib import Path

from sparkrack.cli import build_namespace
from sparkrack.rehearsal.hostprep import REQUIRED_COMMANDS, SUITE_COMMANDS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def section(title: str) -> str:
    """The README's `## title` section."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_tasks() -> set[str]:
    """The tasks the Tasks table names: a cell's `rehearsal.cut` `heal` is rehearsal.cut
    and rehearsal.heal; `bench` alone is the top-level name (a collection's default)."""
    names = set()
    for row in section("Tasks").splitlines():
        if not row.startswith("| `"):
            continue
        prefix = ""
        for code in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            word = code.split()[0]
            if "." in word:
                prefix = word.split(".")[0] + "."
                names.add(word)
            else:
                names.add(prefix + word)
    return names


def test_the_task_table_names_every_task():
    listed = build_namespace().task_names
    known = set(listed) | {alias for aliases in listed.values() for alias in aliases}
    named = table_tasks()
    assert named - known == set(), "the README's table names tasks that do not exist"
    missing = {name for name, aliases in listed.items()
               if name not in named and not set(aliases) & named}
    assert missing == set(), f"README.md's Tasks table lacks {sorted(missing)}"


def test_lane_is_defined_where_it_is_first_used():
    first = re.search(r"\blanes?\b", README, re.IGNORECASE)
    assert README[first.start() - 2:first.end() + 2] == "**lane**", \
        README[first.start() - 80:first.end() + 40]


def test_the_quick_start_says_what_it_installs_as_root():
    quick = section("Quick start")
    assert "Debian packages as root" in quick and "apt-get" in quick
    for package in {*REQUIRED_COMMANDS.values(), *SUITE_COMMANDS.values()}:
        assert f"`{package}`" in quick, f"the quick start does not name {package}"
