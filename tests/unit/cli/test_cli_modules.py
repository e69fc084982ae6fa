"""One CLI module per command collection, named as the collection (issue 48): `invoke watch`
and `watch.install` both live in cli/watch_tasks.py. The namespace is built from the modules
found, so a new command never means editing a list."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from invoke import task

import sparkrack.cli as cli
from sparkrack.cli import build_namespace, namespace_of, task_modules

CLI = Path(cli.__file__).parent


def _module(name: str, collection: str | None, *commands: str) -> ModuleType:
    """A task module: COLLECTION and one task per command, defined in it."""
    module = ModuleType(f"sparkrack.cli.{name}")
    module.COLLECTION = collection
    for command in commands:
        def body(c):
            """A task."""
        body.__module__, body.__name__ = module.__name__, command
        setattr(module, command, task(body))
    return module


def test_every_task_module_in_the_folder_is_found():
    found = {Path(m.__file__).name for m in task_modules()}
    assert found == {p.name for p in CLI.glob("*_tasks.py")}
    assert all(hasattr(m, "COLLECTION") for m in task_modules())


def test_a_collection_lives_whole_in_the_module_named_for_it():
    ns = build_namespace()
    for name, collection in ns.collections.items():
        homes = {t.__module__ for t in collection.tasks.values()}
        assert homes == {f"sparkrack.cli.{name.replace('-', '_')}_tasks"}, name
    for name, command in ns.tasks.items():
        module = next(m for m in task_modules() if m.__name__ == command.__module__)
        assert module.COLLECTION is None, f"{name} is top-level but {module.__name__} " \
                                          f"holds the collection {module.COLLECTION}"


def test_each_module_docstring_names_what_it_holds():
    ns = build_namespace()
    for module in task_modules():
        doc = module.__doc__ or ""
        if module.COLLECTION is not None:
            assert f"`{module.COLLECTION}` collection" in doc, module.__name__
            continue
        held = [n for n, t in ns.tasks.items() if t.__module__ == module.__name__]
        assert held, f"{module.__name__} holds no command"
        for name in held:
            assert f"`{name}" in doc or f"`invoke {name}" in doc, (module.__name__, name)


def test_a_new_module_adds_its_commands_without_a_list():
    ns = namespace_of([_module("demo_tasks", "demo", "one", "two"),
                       _module("spare_tasks", None, "three")])
    assert sorted(ns.task_names) == ["demo.one", "demo.two", "three"]


def test_a_task_a_module_imports_is_not_its_own():
    home = _module("home_tasks", None, "mine")
    other = _module("other_tasks", "other", "theirs")
    other.mine = home.mine
    assert sorted(namespace_of([home, other]).task_names) == ["mine", "other.theirs"]


@pytest.mark.parametrize("second", [_module("b_tasks", None, "up"),
                                    _module("b_tasks", "up", "down")],
                         ids=["a command twice", "a collection named as a command"])
def test_a_name_claimed_by_two_modules_is_refused(second):
    with pytest.raises(ValueError, match=r"`up` is in both sparkrack.cli.a_tasks and "
                                         r"sparkrack.cli.b_tasks"):
        namespace_of([_module("a_tasks", None, "up"), second])
