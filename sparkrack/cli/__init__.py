"""The invoke front door: collections built from the task modules.

Two doors to the same tasks: `invoke TASK` in a checkout of the repo (tasks.py there calls
build_namespace), and `sparkrack TASK` anywhere (`main`, the console script an installed
sparkrack brings: invoke's Program with this namespace, so no tasks.py is needed).
"""

import sys

from invoke import Collection, Program

from .. import console
from . import (bench_tasks, check_tasks, engine_tasks, export_tasks, fabric_tasks, learn_tasks,
               lock_tasks, logs_tasks, onboard_tasks, power_tasks, provision_tasks, rack_tasks,
               rehearsal_stub_tasks, rehearsal_tasks, run_tasks, twin_tasks, watch_tasks,
               weights_tasks)

TOP_LEVEL = (
    engine_tasks.plan, engine_tasks.up, engine_tasks.down, engine_tasks.break_glass,
    engine_tasks.roll,
    check_tasks.check, export_tasks.export, power_tasks.power, power_tasks.power_cycle,
    power_tasks.restart_rack,
    power_tasks.reboot, provision_tasks.provision, provision_tasks.unprovision, provision_tasks.burn,
    onboard_tasks.onboard, lock_tasks.lock, lock_tasks.unlock, lock_tasks.log_,
    run_tasks.run_command, logs_tasks.logs,
)


def build_namespace() -> Collection:
    """The root collection: rack tasks at the top, `watch` (and `watch.*`), `rehearsal.*`,
    `bench.*`, `weights.*` and `engines.*` below."""
    ns = Collection.from_module(rack_tasks)
    for top in TOP_LEVEL:
        ns.add_task(top)
    # as with watch: `invoke facts` is the collection's default task, facts.capture beside it
    del ns.tasks["facts"]
    facts = Collection("facts")
    facts.add_task(rack_tasks.facts, default=True)
    facts.add_task(twin_tasks.capture)
    ns.add_collection(facts)
    # invoke cannot have a task and a collection both called watch: `invoke watch` is the
    # collection's default task, the rank watchdog in a shell, with its flags as before
    watch = Collection("watch")
    watch.add_task(engine_tasks.watch, default=True)
    for service_task in (watch_tasks.install, watch_tasks.uninstall, watch_tasks.status):
        watch.add_task(service_task)
    ns.add_collection(watch)
    rehearsal = Collection.from_module(rehearsal_tasks)
    rehearsal.add_task(rehearsal_stub_tasks.stub_images)
    rehearsal.add_task(rehearsal_stub_tasks.stub_model)
    ns.add_collection(rehearsal, name="rehearsal")
    ns.add_collection(Collection.from_module(bench_tasks, name="bench"))
    ns.add_collection(Collection.from_module(fabric_tasks, name="fabric"))
    weights = Collection("weights")
    for weights_task in (weights_tasks.stage, weights_tasks.verify, weights_tasks.list_,
                         weights_tasks.remove):
        weights.add_task(weights_task)
    ns.add_collection(weights)
    engines = Collection("engines")
    engines.add_task(learn_tasks.learn)
    ns.add_collection(engines)
    return ns


def main() -> None:
    """The `sparkrack` command: `sparkrack --list`, `sparkrack plan --engine sglang ...`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("sparkrack")
    except PackageNotFoundError:  # a checkout that was never installed
        release = "unknown"
    Sparkrack(name="sparkrack", binary="sparkrack", namespace=build_namespace(),
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
