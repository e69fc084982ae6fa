"""`invoke watch.uninstall`: the watchdog service, its files and its key taken off the rack.

plan_uninstall (pure) says which directories to remove; uninstall undoes role watchdog on
its node (provisioning's absent mode: the service stopped and disabled, its unit and stamp
removed), removes its directories (never one watch.install did not make), then takes the
key's line off every node (role watchdog_key, absent) and the record beside the inventory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.facts.watchdog import NodeState
from sparkrack.inventory.watchdog_dir import MARKER_FILE, kind_problem
from sparkrack.inventory.watchdog_record import read_record, record_path, watchdog_node
from sparkrack.remote import text
from sparkrack.watchdog.settings import (
    Say,
    Settings,
    check_settings,
    failure,
    probe,
    run_play,
    run_step,
    service_vars,
    with_install_dir,
)


@dataclass
class UninstallPlan:
    """What uninstall removes on the node besides role watchdog's unit and state."""

    node: str
    refusal: str | None = None  # the install directory is not the watchdog's: nothing is done
    remove_dirs: list[str] = field(default_factory=list)


def plan_uninstall(node: str, state: NodeState, settings: Settings) -> UninstallPlan:
    """The directories uninstall removes on node (its install and state directories); a
    refusal when the install directory is not one watch.install made."""
    plan = UninstallPlan(node)
    problem = kind_problem(settings.install_dir, state.install_dir_kind)
    if problem:
        plan.refusal = f"{node}: --install-dir {problem}"
        return plan
    if state.install_dir_kind in ("marked", "legacy"):
        plan.remove_dirs.append(settings.install_dir)
    if state.state_dir or state.state is not None:
        plan.remove_dirs.append(settings.state_dir)
    return plan


@dataclass
class UninstallReport:
    node: str
    plan: UninstallPlan | None = None
    role: list[str] = field(default_factory=list)  # role watchdog undone, one line a change
    deauthorized: list[str] = field(default_factory=list)
    unrecorded: bool = False
    check: bool = False
    node_error: str = ""  # the watchdog's node could not be cleaned up: why

    @property
    def changed_node(self) -> bool:
        return bool(self.role or (self.plan and self.plan.remove_dirs))


def uninstall(inventory, on: str | None = None, *, settings: Settings = Settings(),
              check: bool = False, say: Say = print, provision_fn=None) -> UninstallReport:
    """Remove the watchdog: the service (stopped, disabled, unit file gone), its install
    directory (key included) and state on its node, the key's line on every node, and the
    record beside the inventory. A watchdog node that does not answer keeps its files, but
    the key is still taken away from every other node; the record stays until a run
    completes."""
    from sparkrack.inventory.watchdog_record import remove_record
    from sparkrack.oplock.audit import note

    record = read_record(inventory.path)
    node = watchdog_node(inventory, on, record)
    if record is not None and record.node == node.name:
        settings = with_install_dir(settings, record.install_dir)
    check_settings(settings)
    report = UninstallReport(node.name, check=check)
    if provision_fn is None:
        from sparkrack.provision import provision as provision_fn
    try:
        _uninstall_node(inventory, node, settings, report, check, say, provision_fn)
    except SparkrackError as error:
        if check:
            raise
        # its node is dead or refuses: still take the key away from every other node
        report.node_error = error.line()
        say(f"watch.uninstall: {node.name}: {report.node_error}; its files stay there")
    if check:
        return report
    result = provision_fn(inventory, roles="watchdog_key", absent=True)
    report.deauthorized = [run.node for run in result.nodes if result.recap(run.node)["changed"]]
    bad = [run for run in result.nodes if result.recap(run.node)["failed"]
           or result.recap(run.node)["unreachable"]]
    note(nodes=report.deauthorized)
    problems = [f"{run.node}: {run.error or failure(run)}" for run in bad]
    if report.node_error:
        problems.insert(0, f"{node.name}: {report.node_error}")
    if problems:
        raise SparkrackError("watch.uninstall is not complete: " + "; ".join(problems),
                             fix="run `invoke watch.uninstall` again once they answer (the key "
                             "record is kept until then)")
    say(f"watch.uninstall: the watchdog's key is on no node ({len(report.deauthorized)} "
        "changed)")
    report.unrecorded = remove_record(inventory.path)
    if report.unrecorded:
        say(f"watch.uninstall: removed {record_path(inventory.path)}")
    return report


def _uninstall_node(inventory, node, settings: Settings, report: UninstallReport, check: bool,
                    say: Say, provision_fn) -> None:
    """Role watchdog undone on its node (stopped, disabled, the unit gone), then its
    directories removed."""
    from sparkrack.fleet import Fleet
    from sparkrack.oplock.audit import note

    record = read_record(inventory.path)
    with Fleet(inventory, [node]) as fleet:
        state = probe(fleet, node, settings, inventory)
        plan = plan_uninstall(node.name, state, settings)
        report.plan = plan
        if plan.refusal:
            raise UsageError(plan.refusal, fix="uninstall with the --install-dir it was installed "
                             f"in, or correct install_dir in {record_path(inventory.path)}")
        report.role, _ = run_play(provision_fn, inventory, node, "watchdog",
                                  service_vars(settings), say, command="watch.uninstall",
                                  check=check, absent=True)
        for directory in plan.remove_dirs:
            say(f"watch.uninstall: {'would ' if check else ''}remove {directory}")
        if check:
            say("watch.uninstall: would remove the watchdog's key from every node "
                "(role watchdog_key, absent)" + (f" and {record_path(inventory.path)}"
                                                  if record else ""))
            return
        if plan.remove_dirs:
            install_dir = settings.install_dir if settings.install_dir in plan.remove_dirs else ""
            run_step(fleet, node.name, ["sh", "-c", text("remove"), "sh", MARKER_FILE,
                                        install_dir,
                                        *(d for d in plan.remove_dirs if d != install_dir)],
                     what="removing the install and state directories")
        unit_gone = any(settings.unit_path in line for line in report.role)
        note(nodes=[node.name] if report.changed_node else [],
             files=[*([settings.unit_path] if unit_gone else []), *plan.remove_dirs])
