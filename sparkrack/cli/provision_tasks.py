"""Provisioning tasks: `provision` (roles, plan/apply/re-plan), `unprovision`, `burn`."""

from invoke import task
from invoke.exceptions import Exit

from .. import console
from ..errors import UsageError
from .common import INVENTORY_HELP, WAIT_HELP, inventory_from, rack_task

LIMIT_HELP = "only these nodes (or groups), e.g. spark-01,spark-03"
ROLE_HELP = "only these roles, comma-separated (default: all of roles/site.yml, in order)"


def _note(report):
    """Tell the audit record what the run changed: nodes, files written, images moved."""
    from ..oplock.audit import note

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
    from ..provision.report import as_json, print_outcome, print_recap

    _note(report)
    if json:
        console.print_json(as_json(report))
    else:
        print_outcome(report, console.out)
        print_recap(report, console.out)
    if report.exit_code:
        raise Exit(code=report.exit_code)


def _on_planned(diff: bool, json: bool):
    def event(name, report):
        if name == "planned" and not json:
            from ..provision.report import print_plan

            print_plan(report, console.out, diff=diff)
    return event


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "role": ROLE_HELP,
            "check": "plan only: show what would change, change nothing",
            "diff": "show full unified diffs of files (secret values as ***)",
            "json": "print the whole report as JSON instead", **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"])
def provision(c, inventory=None, limit=None, role=None, check=False, diff=False, json=False):
    """Make the nodes what the inventory says, and show what changed.

    Gather facts (one round trip per node), plan, show, apply, re-plan; recap per node.

    Exit 1 when a node failed, did not converge or could not be reached."""
    from ..provision import provision as run_provision

    rack = inventory_from(inventory)
    report = run_provision(rack, limit, roles=role, check=check,
                           on_event=_on_planned(diff, json))
    _show(report, diff=diff, json=json)


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "role": ROLE_HELP,
            "check": "plan only", "diff": "show diffs", "json": "print JSON",
            "force": "allow removing the clock cap on a real rack (uncaps the GPUs)",
            **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"])
def unprovision(c, inventory=None, limit=None, role=None, check=False, diff=False, json=False,
                force=False):
    """Remove what provision wrote (files, units, drop-ins, images)."""
    from ..provision import roles_path, site_roles
    from ..provision import unprovision as run_unprovision

    rack = inventory_from(inventory)
    roles = ([r.strip() for r in role.split(",")] if role
             else list(site_roles(roles_path(rack.path))))
    if "clock_cap" in roles and not rack.is_rehearsal and not force and not check:
        raise UsageError("unprovision would stop the clock cap and uncap every GPU: an "
                         "uncapped rack can trip its power strip",
                         fix="pass --role without clock_cap, or --force")
    if force and "clock_cap" in roles:
        from ..oplock.audit import note

        note(overrides=["unprovision --force: the clock cap removed (GPUs uncapped)"])
    report = run_unprovision(rack, limit, roles=roles, check=check,
                             on_event=_on_planned(diff, json))
    _show(report, diff=diff, json=json)


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP,
            "seconds": "how long the load runs (default 5)", "json": "print JSON", **WAIT_HELP})
@rack_task()
def burn(c, inventory=None, limit=None, seconds=5.0, json=False):
    """Load every GPU, sample its clock: ok, UNCAPPED or LATCHED per node.

    SM clock and power are sampled on every GPU at once.

    Records the verdict on each node (`invoke status` shows it). Exit 1 if any node is not
    ok."""
    from ..safety.burn import burn as burn_check

    rack = inventory_from(inventory)
    seconds = float(seconds)
    if not 1 <= seconds <= 600:
        raise UsageError(f"--seconds {seconds:g} out of range", fix="give 1..600")
    results = burn_check(rack, limit, seconds)
    from ..facts.node import BURN_RECORD
    from ..oplock.audit import note

    note(nodes=[r.node for r in results if r.recorded], files=[BURN_RECORD],
         burn={r.node: r.verdict for r in results})
    if json:
        console.print_json([r.as_dict() for r in results])
    else:
        console.print_table(
            f"burn check ({seconds:g} s under load)",
            ["node", "verdict", "max SM MHz", "max power", "cap MHz", "samples", "reason"],
            [[r.node, r.verdict, r.max_sm_mhz,
              None if r.max_power_w is None else f"{r.max_power_w:.1f} W", r.cap_mhz,
              len(r.samples), r.reason] for r in results])
    bad = [r for r in results if not r.ok]
    if bad:
        raise Exit(f"{len(bad)} of {len(results)} node(s) failed the burn check: "
                   + ", ".join(f"{r.node} {r.verdict}" for r in bad), code=1)
