"""systemd: a unit enabled or disabled, started, stopped or restarted.

`daemon-reload` is planned once, only after a unit file or drop-in changed (or systemd
says it needs one), before the next systemd action or, at the latest (`finish`), before
the handlers. A `restarted` handler skips a unit this run started or stopped. Absent mode
stops, resets and disables the unit (a handler is planned as written). `systemctl` names
the node's systemctl when it is not the one on its PATH.
"""

from __future__ import annotations

from dataclasses import replace

from sparkrack.facts.systemd import unit_query
from sparkrack.provision.changes import Action, Change, Run
from sparkrack.provision.modules.base import Module, PlanState, Step
from sparkrack.provision.modules.params import Param

NAME = "systemd"
PARAMS = {
    "name": Param("str", "the unit", "sparkrack-clock-cap.service", required=True),
    "enabled": Param("bool", "started at boot: true enables it, false disables it (left "
                     "out: as it is)", True),
    "state": Param("str", "started (unless active), stopped (unless inactive) or restarted "
                   "(unless this run started or stopped it); left out: as it is", "started",
                   choices=("started", "stopped", "restarted")),
    "systemctl": Param("str", "the node's systemctl, when not the one on its PATH",
                       "/usr/bin/systemctl", default="systemctl"),
}


def plan(step: Step) -> Change:
    """The systemctl commands that put the unit in the state the task says."""
    base, p, state = step.base, step.params, step.state
    name, sc = str(p["name"]), str(p.get("systemctl", "systemctl"))
    unit = step.facts.unit(name)
    actions: list[Action] = []
    what: list[str] = []
    if state.absent and not base.handler:
        if unit.load == "not-found" and not unit.is_enabled:
            return replace(base, summary=f"{name} absent")
        if unit.active in ("active", "activating", "reloading"):
            actions.append(Run((sc, "stop", name)))
            what.append("stop")
        if unit.active == "failed":
            actions.append(Run((sc, "reset-failed", name)))
            what.append("reset-failed")
        if unit.enabled in ("enabled", "enabled-runtime"):
            actions.append(Run((sc, "disable", name)))
            what.append("disable")
        state.stopped.add(name)
        if not actions:
            return replace(base, summary=f"{name} stopped, disabled")
        return replace(base, status="changed", summary=f"{name}: {', '.join(what)}",
                       actions=tuple(actions))
    if state.reload_pending or (unit.need_reload and not state.reloaded):
        actions.append(Run((sc, "daemon-reload")))
        what.append("daemon-reload")
        state.reload_pending, state.reloaded = False, True
    enabled = p.get("enabled")
    if enabled is True and not unit.is_enabled:
        actions.append(Run((sc, "enable", name)))
        what.append("enable")
    elif enabled is False and unit.enabled in ("enabled", "enabled-runtime"):
        actions.append(Run((sc, "disable", name)))
        what.append("disable")
    wanted = p.get("state")
    if wanted == "started" and unit.active != "active":
        if unit.active == "failed":
            actions.append(Run((sc, "reset-failed", name)))
        actions.append(Run((sc, "start", name)))
        what.append("start" if unit.active != "failed" else "start (was failed)")
        state.started.add(name)
    elif wanted == "stopped" and unit.active in ("active", "activating", "failed"):
        actions.append(Run((sc, "stop", name)))
        what.append("stop")
        state.stopped.add(name)
    elif wanted == "restarted":
        if name in state.started or name in state.stopped:
            verb = "started" if name in state.started else "stopped"
            return replace(base, summary=f"{name}: not restarted ({verb} in this run)")
        actions.append(Run((sc, "restart", name)))
        what.append("restart")
    elif wanted not in (None, "started", "stopped", "restarted"):
        return replace(base, status="failed", summary=f"systemd: unknown state '{wanted}'")
    if not actions:
        return replace(base, summary=f"{name}: {unit.active}, {unit.enabled or 'no unit file'}")
    return replace(base, status="changed", summary=f"{name}: {', '.join(what)}",
                   actions=tuple(actions))


def finish(state: PlanState) -> Change | None:
    """The daemon-reload still pending after every task (no systemd task came after the
    unit file that changed), planned before the handlers."""
    if not state.reload_pending:
        return None
    state.reload_pending = False
    return Change(NAME, "daemon-reload", NAME, "changed", "daemon-reload (unit files changed)",
                  actions=(Run(("systemctl", "daemon-reload")),), deferred=True)


MODULE = Module(
    name=NAME,
    params=PARAMS,
    queries=lambda p: [unit_query(str(p["name"]), str(p["systemctl"]))],
    plan=plan,
    finish=finish,
)
