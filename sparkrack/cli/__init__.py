"""The invoke front door: the namespace built from the task modules, sparkrack/cli/*_tasks.py.

Each task module declares COLLECTION: None for top-level commands (`up`, `status`), else the
collection it holds, whole (`watch`, `watch.install`: watch_tasks.py); its tasks are the ones
it defines. A new command goes into its module; nothing here lists them (docs/internals.md).

Two doors to the same tasks: `invoke TASK` in a checkout of the repo (tasks.py there calls
build_namespace), and `sparkrack TASK` anywhere (`main`, the console script an installed
sparkrack brings: invoke's Program with this namespace, so no tasks.py is needed).
"""

import importlib
import pkgutil
import sys
from types import ModuleType

from invoke import Collection, Program, Task

from sparkrack.core import console


def build_namespace() -> Collection:
    """The root collection: every task module's tasks, at the top or in its collection."""
    return namespace_of(task_modules())


def task_modules() -> list[ModuleType]:
    """The modules of this package named *_tasks, imported, by name."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.endswith("_tasks"))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def namespace_of(modules: list[ModuleType]) -> Collection:
    """The root collection of modules: a COLLECTION None module's tasks at the top, any other
    module's as the collection it names (with the module's docstring); a command name or a
    collection name claimed twice is refused."""
    ns = Collection("sparkrack")
    homes: dict[str, str] = {}
    for module in modules:
        tasks = [v for v in vars(module).values()
                 if isinstance(v, Task) and v.__module__ == module.__name__]
        if module.COLLECTION is None:
            for task in tasks:
                _claim(homes, ns.transform(task.name), module)
                ns.add_task(task)
            continue
        _claim(homes, module.COLLECTION, module)
        parent, _, name = module.COLLECTION.rpartition(".")
        collection = Collection(name)
        collection.__doc__ = module.__doc__
        for task in tasks:
            collection.add_task(task)
        # a dotted name (`fleet.router`) is a collection inside its parent's (modules come
        # by name: fleet_tasks before fleetrouter_tasks)
        (ns.collections[parent] if parent else ns).add_collection(collection)
    return ns


def _claim(homes: dict[str, str], name: str, module: ModuleType) -> None:
    """Record that module holds the top-level name; ValueError if another module does."""
    if name in homes:
        raise ValueError(f"`{name}` is in both {homes[name]} and {module.__name__}: one "
                         "command or collection, one module")
    homes[name] = module.__name__


def main(binary: str = "sparkrack") -> None:
    """The `sparkrack` command: `sparkrack --list`, `sparkrack plan --engine sglang ...`
    (binary: the command as typed, which help and error lines name)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("sparkrack")
    except PackageNotFoundError:  # a checkout that was never installed
        release = "unknown"
    Sparkrack(name="sparkrack", binary=binary, namespace=build_namespace(),
              version=release).run()


class Sparkrack(Program):
    """invoke's Program whose help, task list and error lines name `sparkrack TASK`, the
    command the operator typed, where the texts say `invoke TASK`."""

    def run(self, argv=None, exit: bool = True) -> None:
        console.COMMAND["name"] = self.binary
        super().run(argv, exit)

    def print_task_help(self, name: str) -> None:
        _typed(lambda: super(Sparkrack, self).print_task_help(name))

    def print_help(self) -> None:
        _typed(super().print_help)

    def list_tasks(self) -> None:
        _typed(super().list_tasks)


def _typed(show) -> None:
    """Run show() (it prints), then print its text as typed (console.as_typed)."""
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        show()
    sys.stdout.write(console.as_typed(text.getvalue()))
