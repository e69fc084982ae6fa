"""The invoke front door: collections built from the task modules (see tasks.py)."""

from invoke import Collection

from . import (bench_tasks, check_tasks, engine_tasks, provision_tasks, rack_tasks, rehearsal_stub_tasks,
               rehearsal_tasks)


def build_namespace() -> Collection:
    """The root collection: rack tasks at the top, `rehearsal.*` for the local rack."""
    ns = Collection.from_module(rack_tasks)
    for engine_task in (engine_tasks.plan, engine_tasks.up, engine_tasks.down, engine_tasks.roll,
                        engine_tasks.watch):
        ns.add_task(engine_task)
    ns.add_task(check_tasks.check)
    for provision_task in (provision_tasks.provision, provision_tasks.unprovision, provision_tasks.burn):
        ns.add_task(provision_task)
    rehearsal = Collection.from_module(rehearsal_tasks)
    rehearsal.add_task(rehearsal_stub_tasks.stub_images)
    rehearsal.add_task(rehearsal_stub_tasks.stub_model)
    ns.add_collection(rehearsal, name="rehearsal")
    ns.add_collection(Collection.from_module(bench_tasks, name="bench"))
    return ns
