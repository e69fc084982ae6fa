"""The invoke front door: collections built from the task modules (see tasks.py)."""

from invoke import Collection

from . import (bench_tasks, check_tasks, engine_tasks, export_tasks, lock_tasks, logs_tasks,
               onboard_tasks, power_tasks, provision_tasks, rack_tasks, rehearsal_stub_tasks,
               rehearsal_tasks, run_tasks)

TOP_LEVEL = (
    engine_tasks.plan, engine_tasks.up, engine_tasks.down, engine_tasks.roll, engine_tasks.watch,
    check_tasks.check, export_tasks.export, power_tasks.power, power_tasks.restart_rack,
    power_tasks.reboot, provision_tasks.provision, provision_tasks.unprovision, provision_tasks.burn,
    onboard_tasks.onboard, lock_tasks.lock, lock_tasks.unlock, lock_tasks.log_,
    run_tasks.run_command, logs_tasks.logs,
)


def build_namespace() -> Collection:
    """The root collection: rack tasks at the top, `rehearsal.*` and `bench.*` below."""
    ns = Collection.from_module(rack_tasks)
    for top in TOP_LEVEL:
        ns.add_task(top)
    rehearsal = Collection.from_module(rehearsal_tasks)
    rehearsal.add_task(rehearsal_stub_tasks.stub_images)
    rehearsal.add_task(rehearsal_stub_tasks.stub_model)
    ns.add_collection(rehearsal, name="rehearsal")
    ns.add_collection(Collection.from_module(bench_tasks, name="bench"))
    return ns
