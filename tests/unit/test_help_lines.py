"""`invoke --list` shows each task's first docstring line: it must be a whole sentence that
reads on one line of the list on a 100-column terminal, never one cut mid-sentence."""

from __future__ import annotations

import inspect

import pytest

from sparkrack.cli import build_namespace

# `invoke --list` on 100 columns: 2 spaces, the longest name (a default task with its
# alias, `rehearsal.renumber-gid`: 22), 4 of padding, 1 kept free (invoke's print_columns)
LIST_WIDTH = 100 - 2 - 22 - 4 - 1


def tasks(collection, prefix=""):
    for name, task in collection.tasks.items():
        yield prefix + name, task
    for name, child in collection.collections.items():
        yield from tasks(child, f"{prefix}{name}.")


TASKS = sorted(tasks(build_namespace()), key=lambda item: item[0])
assert max(len(name) for name, _ in TASKS) <= 22  # LIST_WIDTH's longest name


@pytest.mark.parametrize("name,task", TASKS, ids=[name for name, _ in TASKS])
def test_the_first_line_is_a_whole_sentence_that_fits(name, task):
    lines = inspect.cleandoc(task.body.__doc__ or "").splitlines()
    first = lines[0] if lines else ""
    assert first.endswith("."), f"{name}: {first!r} stops mid-sentence"
    assert len(lines) == 1 or lines[1] == "", f"{name}: its first sentence runs on: {lines[1]!r}"
    assert len(first) <= LIST_WIDTH, f"{name}: {len(first)} characters: {first!r}"
