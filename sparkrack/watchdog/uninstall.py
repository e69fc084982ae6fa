"""`invoke watch.uninstall`: the watchdog service, its files and its key taken off the rack.

plan_uninstall (pure) says what is there to remove; uninstall stops, disables and removes
the service and its directories on its node (never a directory watch.install did not
make), then takes the key's line off every node (role watchdog_key, absent) and the record
beside the inventory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SparkrackError, UsageError
from ..facts.watchdog import NodeState
from ..inventory.watchdog_dir import MARKER_FILE, kind_problem
from ..inventory.watchdog_record import read_record, record_path
from ..remote import text
from .install import failure
from .settings import (
    UNIT, Say, Settings, check_settings, probe, run_step, watchdog_node, with_install_dir)


@dataclass
class UninstallPlan:
    node: str
    refusal: str | None = None  # the install directory is not the watchdog's: nothing is done
    stop: bool = False
    disable: bool = False
    reset_failed: bool = False
    remove_unit: bool = False
    remove_dirs: list[str] = field(default_factory=list)

    @property
    def changes_node(self) -> bool:
        return bool(self.stop or self.disable or self.reset_failed or self.remove_unit
                    or self.remove_dirs)

    def steps(self, settings: Settings) -> list[str]:
        """What the plan does, one line each (the check mode's output)."""
        return [line for wanted, line in (
            (self.stop, f"stop {UNIT}"), (self.disable, f"disable {UNIT}"),
            (self.reset_failed, f"reset-failed {UNIT}"),
            (self.remove_unit, f"remove {settings.unit_path}; daemon-reload")) if wanted] \
            + [f"remove {directory}" for directory in self.remove_dirs]


def plan_uninstall(node: str, state: NodeState, settings: Settings) -> UninstallPlan:
    """What uninstall must do on node so that nothing of the watchdog is left there; a
    refusal when the install directory is not one watch.install made."""
    plan = UninstallPlan(node)
    problem = kind_problem(settings.install_dir, state.install_dir_kind)
    if problem:
        plan.refusal = f"{node}: --install-dir {problem}"
        return plan
    plan.stop = state.active
    plan.disable = state.enabled
    plan.reset_failed = state.unit.get("ActiveState") == "failed"
    plan.remove_unit = state.unit_file is not None
    if state.install_dir_kind in ("marked", "legacy"):
        plan.remove_dirs.append(settings.install_dir)
    if state.state_dir or state.state is not None:
        plan.remove_dirs.append(settings.state_dir)
    return plan


@dataclass
class UninstallReport:
    node: str
    plan: UninstallPlan | None = None
    deauthorized: list[str] = field(default_factory=list)
    unrecorded: bool = False
    check: bool = False
    node_error: str = ""  # the watchdog's node could not be cleaned up: why


def uninstall(inventory, on: str | None = None, *, settings: Settings = Settings(),
              check: bool = False, say: Say = print, provision_fn=None) -> UninstallReport:
    """Remove the watchdog: the service (stopped, disabled, unit file gone), its install
    directory (key included) and state on its node, the key's line on every node, and the
    record beside the inventory. A watchdog node that does not answer keeps its files, but
    the key is still taken away from every other node; the record stays until a run
    completes."""
    from ..oplock.audit import note
    from ..inventory.watchdog_record import remove_record

    record = read_record(inventory.path)
    node = watchdog_node(inventory, on, record)
    if record is not None and record.node == node.name:
        settings = with_install_dir(settings, record.install_dir)
    check_settings(settings)
    report = UninstallReport(node.name, check=check)
    try:
        _uninstall_node(inventory, node, settings, report, check, say)
    except SparkrackError as error:
        if check:
            raise
        # its node is dead or refuses: still take the key away from every other node
        report.node_error = error.line()
        say(f"watch.uninstall: {node.name}: {report.node_error}; its files stay there")
    if check:
        return report
    if provision_fn is None:
        from ..provision import provision as provision_fn
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
                    say: Say) -> None:
    """Stop, disable and remove the service and its files on its node."""
    from ..fleet import Fleet
    from ..oplock.audit import note

    record = read_record(inventory.path)
    with Fleet(inventory, [node]) as fleet:
        state = probe(fleet, node, settings, inventory)
        plan = plan_uninstall(node.name, state, settings)
        report.plan = plan
        if plan.refusal:
            raise UsageError(plan.refusal, fix="uninstall with the --install-dir it was installed "
                             f"in, or correct install_dir in {record_path(inventory.path)}")
        for line in plan.steps(settings):
            say(f"watch.uninstall: {'would ' if check else ''}{line}")
        if check:
            say("watch.uninstall: would remove the watchdog's key from every node "
                "(role watchdog_key, absent)" + (f" and {record_path(inventory.path)}"
                                                  if record else ""))
            return
        sc = settings.systemctl
        if plan.stop:
            run_step(fleet, node.name, [sc, "stop", UNIT], what="stopping the watchdog")
        if plan.disable:
            run_step(fleet, node.name, [sc, "disable", UNIT], what="disabling the watchdog")
        if plan.reset_failed:
            run_step(fleet, node.name, [sc, "reset-failed", UNIT], what="reset-failed")
        if plan.remove_unit:
            run_step(fleet, node.name, ["rm", "-f", "--", settings.unit_path], what="removing the unit")
            run_step(fleet, node.name, [sc, "daemon-reload"], what="daemon-reload")
        if plan.remove_dirs:
            install_dir = settings.install_dir if settings.install_dir in plan.remove_dirs else ""
            run_step(fleet, node.name, ["sh", "-c", text("remove"), "sh", MARKER_FILE, install_dir,
                                    *(d for d in plan.remove_dirs if d != install_dir)],
                 what="removing the install and state directories")
        note(nodes=[node.name] if plan.changes_node else [],
             files=[*([settings.unit_path] if plan.remove_unit else []), *plan.remove_dirs])
