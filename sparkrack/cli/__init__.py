"""The invoke front door: collections built from the task modules (see tasks.py)."""

from invoke import Collection

from . import check_tasks, engine_tasks, rack_tasks, rehearsal_tasks


def build_namespace() -> Collection:
    """The root collection: rack tasks at the top, `rehearsal.*` for the local rack."""
    ns = Collection.from_module(rack_tasks)
    ns.add_task(engine_tasks.plan)
    ns.add_task(check_tasks.check)
    ns.add_collection(Collection.from_module(rehearsal_tasks), name="rehearsal")
    return ns
