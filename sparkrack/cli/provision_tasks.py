"""Provisioning, top-level commands: `provision` (roles, plan/apply/re-plan), `unprovision`."""

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, WAIT_HELP, inventory_from, rack_task
from sparkrack.cli.flags import LIMIT_HELP, QUIET_HELP, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = None

ROLE_HELP = "only these roles, comma-separated (default: all of roles/site.yml, in order)"


def _note(report):
    """Tell the audit record what the run changed: nodes, files written, images moved."""
    from sparkrack.oplock.audit import note

    if report.check:
        return
    files, nodes = set(), set()
    for run in report.nodes:
        applied = set(run.applied.applied) if run.applied else set()
        for index, change in enumerate(run.plan):
            if change.changed and index in applied:
                nodes.add(run.node)
                files.update(a.path for a in change.actions if hasattr(a, "path"))
    note(nodes=sorted(nodes), files=sorted(files),
         images=sorted(f"{t.ref}@{node}" for t in report.transfers for node in t.targets
                       if node not in t.errors))


def _show(report, *, diff: bool, json: bool):
    """Print the outcome and the recap (the plan was printed before the apply)."""
    from sparkrack.provision.report import as_json, print_outcome, print_recap

    _note(report)
    if json:
        console.print_json(as_json(report))
    else:
        print_outcome(report, console.out)
        print_recap(report, console.out)
    if report.exit_code:
        raise Exit(code=report.exit_code)


def _roles_load(arguments, rack):
    """The roles load, their tasks checked, before the lock is taken: a mistake in a role
    file contacts nothing."""
    from sparkrack.provision import load_roles, roles_path

    load_roles(arguments["role"], roles_path(rack.path))


def _on_planned(diff: bool, json: bool):
    def event(name, report):
        if name == "planned" and not json:
            from sparkrack.provision.report import print_plan

            print_plan(report, console.out, diff=diff)
    return event


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "role": ROLE_HELP,
            "check": "plan only: show what would change, change nothing",
            "diff": "show full unified diffs of files (secret values as ***)",
            "json": "print the whole report as JSON instead", "quiet": QUIET_HELP,
            **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], before=_roles_load)
def provision(c, inventory=None, limit=None, role=None, check=False, diff=False, json=False,
              quiet=False):
    """Make the nodes what the inventory says, and show what changed.

    Gather facts (one round trip per node), plan, show, apply, re-plan; recap per node. An
    engine image on its way shows each node's bytes, rate and time left.

    Exit 1 when a node failed, did not converge or could not be reached."""
    from sparkrack.provision import provision as run_provision
    from sparkrack.transfer.show import TransferProgress

    rack = inventory_from(inventory)
    with TransferProgress(quiet=quiet, silent=json) as progress:
        report = run_provision(rack, limit, roles=role, check=check,
                               on_event=_on_planned(diff, json), on_progress=progress)
    _show(report, diff=diff, json=json)


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "role": ROLE_HELP,
            "check": "plan only", "diff": "show diffs", "json": "print JSON",
            "force": "allow removing the clock cap on a real rack (uncaps the GPUs)",
            **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], before=_roles_load)
def unprovision(c, inventory=None, limit=None, role=None, check=False, diff=False, json=False,
                force=False):
    """Remove what provision wrote (files, units, drop-ins, images)."""
    from sparkrack.provision import roles_path, site_roles
    from sparkrack.provision import unprovision as run_unprovision

    rack = inventory_from(inventory)
    roles = ([r.strip() for r in role.split(",")] if role
             else list(site_roles(roles_path(rack.path))))
    if "clock_cap" in roles and not rack.is_rehearsal and not force and not check:
        raise UsageError("unprovision would stop the clock cap and uncap every GPU: an "
                         "uncapped rack can trip its power strip",
                         fix="pass --role without clock_cap, or --force")
    if force and "clock_cap" in roles:
        from sparkrack.oplock.audit import note

        note(overrides=["unprovision --force: the clock cap removed (GPUs uncapped)"])
    report = run_unprovision(rack, limit, roles=roles, check=check,
                             on_event=_on_planned(diff, json))
    _show(report, diff=diff, json=json)
