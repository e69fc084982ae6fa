"""`invoke --list` shows each task's first docstring line (`--list-format nested`, each
collection's: its module's): it must be a whole sentence that reads on one line of the list
on a 100-column terminal, never one cut mid-sentence. The
commands themselves (names, each collection's default) are pinned: moving a task between
modules must not rename, add or drop one."""

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
COLLECTIONS = sorted(build_namespace().collections.items())


@pytest.mark.parametrize("name,task", TASKS + [(name, c) for name, c in COLLECTIONS],
                         ids=[name for name, _ in TASKS] + [f"{name} (collection)"
                                                           for name, _ in COLLECTIONS])
def test_the_first_line_is_a_whole_sentence_that_fits(name, task):
    doc = task.body.__doc__ if hasattr(task, "body") else vars(task).get("__doc__")
    lines = inspect.cleandoc(doc or "").splitlines()
    first = lines[0] if lines else ""
    assert first.endswith("."), f"{name}: {first!r} stops mid-sentence"
    assert len(lines) == 1 or lines[1] == "", f"{name}: its first sentence runs on: {lines[1]!r}"
    assert len(first) <= LIST_WIDTH, f"{name}: {len(first)} characters: {first!r}"


# Every command `invoke --list` shows, with the name its collection's default also answers to
COMMANDS = {
    "break-glass": [], "burn": [], "check": [], "down": [], "export": [], "lock": [],
    "log": [], "logs": [], "onboard": [], "plan": [], "power": [], "power-cycle": [],
    "provision": [], "reboot": [], "restart-rack": [], "roll": [], "run": [], "status": [],
    "unlock": [], "unprovision": [], "up": [], "validate": [],
    "bench.bench": ["bench"], "bench.compare": [],
    "caches.list": ["caches"], "caches.remove": [],
    "engines.learn": [],
    "fabric.check": [],
    "facts.facts": ["facts"], "facts.capture": [], "fleet.status": [], "fleet.roll": [],
    "fleet.up": [], "fleet.down": [], "fleet.router.install": [],
    "monitoring.render": [],
    "rehearsal.add-node": [], "rehearsal.cable": [], "rehearsal.cut": [],
    "rehearsal.cx7-netplan": [], "rehearsal.down": [], "rehearsal.hca-down": [],
    "rehearsal.heal": [], "rehearsal.heat": [], "rehearsal.isolate": [],
    "rehearsal.kernel": [], "rehearsal.latch": [], "rehearsal.nccl-hang": [],
    "rehearsal.pdu-load": [], "rehearsal.power-limit": [], "rehearsal.poweroff": [],
    "rehearsal.poweron": [],
    "rehearsal.reboot": [],
    "rehearsal.rekey": [], "rehearsal.remove-node": [], "rehearsal.renderer": [],
    "rehearsal.renumber-gid": [], "rehearsal.reset-clocks": [], "rehearsal.status": [],
    "rehearsal.stub-images": [], "rehearsal.stub-model": [], "rehearsal.switch": [],
    "rehearsal.up": [], "rehearsal.wedge-host": [], "rehearsal.wipe": [],
    "watch.watch": ["watch"], "watch.install": [], "watch.status": [], "watch.uninstall": [],
    "weights.list": [], "weights.remove": [], "weights.stage": [], "weights.verify": [],
}


def test_the_commands_are_the_ones_operators_know():
    names = build_namespace().task_names
    assert sorted(names) == sorted(COMMANDS)
    assert {name: sorted(aliases) for name, aliases in names.items()} == COMMANDS
