"""systemd: a unit enabled or disabled, started, stopped or restarted.

`daemon-reload` is planned once, only after a unit file or drop-in changed (or systemd
says it needs one), before the next systemd action or, at the latest (`finish`), before
the handlers. A `restarted` handler skips a unit this run started or stopped. Absent mode
stops, resets and disables the unit (a handler is planned as written). `systemctl` names
the node's systemctl when it is not the one on its PATH.
"""

from __future__ import annotations

from dataclasses import replace

from sparkrack.facts.systemd import UnitFacts, unit_query
from sparkrack.provision.changes import Change, Run
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


RUNNING = ("active", "activating", "reloading")  # what unprovision stops
ENABLED = ("enabled", "enabled-runtime")  # what disable undoes (static units have no [Install])
Verb = tuple[str | None, tuple[str, ...]]  # (what the summary says, systemctl's arguments)


def plan(step: Step) -> Change:
    """The systemctl commands that put the unit in the state the task says: a reload if
    one is due, then its enablement, then its run state, each only where it differs."""
    name, state = str(step.params["name"]), step.state
    unit = step.facts.unit(name)
    if state.absent and not step.base.handler:
        return _removed(step, name, unit)
    wanted = step.params.get("state")
    verbs = [*_reload(state, unit), *_enablement(step.params.get("enabled"), name, unit),
             *_run_state(wanted, name, unit, state)]
    return _outcome(step, name, verbs, _as_it_is(wanted, name, unit, state))


def _as_it_is(wanted: str | None, name: str, unit: UnitFacts, state: PlanState) -> str:
    """The summary when nothing is run: the unit's state, or why a restart was left out."""
    if wanted == "restarted" and name in state.started | state.stopped:
        verb = "started" if name in state.started else "stopped"
        return f"{name}: not restarted ({verb} in this run)"
    return f"{name}: {unit.active}, {unit.enabled or 'no unit file'}"


def _reload(state: PlanState, unit: UnitFacts) -> list[Verb]:
    """daemon-reload, once, when a unit file changed in this run or systemd says so."""
    if not (state.reload_pending or (unit.need_reload and not state.reloaded)):
        return []
    state.reload_pending, state.reloaded = False, True
    return [("daemon-reload", ("daemon-reload",))]


def _enablement(enabled: bool | None, name: str, unit: UnitFacts) -> list[Verb]:
    if enabled is True and not unit.is_enabled:
        return [("enable", ("enable", name))]
    if enabled is False and unit.enabled in ENABLED:
        return [("disable", ("disable", name))]
    return []


def _run_state(wanted: str | None, name: str, unit: UnitFacts, state: PlanState
               ) -> list[Verb]:
    """A start (after a reset of a failed unit), a stop, or a restart unless this run
    already started or stopped the unit."""
    if wanted == "started" and unit.active != "active":
        state.started.add(name)
        if unit.active == "failed":
            return [(None, ("reset-failed", name)), ("start (was failed)", ("start", name))]
        return [("start", ("start", name))]
    if wanted == "stopped" and unit.active in ("active", "activating", "failed"):
        state.stopped.add(name)
        return [("stop", ("stop", name))]
    if wanted == "restarted" and name not in state.started | state.stopped:
        return [("restart", ("restart", name))]
    return []


def _removed(step: Step, name: str, unit: UnitFacts) -> Change:
    """Absent mode: the unit stopped, reset and disabled."""
    if unit.load == "not-found" and not unit.is_enabled:
        return replace(step.base, summary=f"{name} absent")
    step.state.stopped.add(name)
    verbs: list[Verb] = [(verb, (verb, name)) for verb, needed in (
        ("stop", unit.active in RUNNING), ("reset-failed", unit.active == "failed"),
        ("disable", unit.enabled in ENABLED)) if needed]
    return _outcome(step, name, verbs, f"{name} stopped, disabled")


def _outcome(step: Step, name: str, verbs: list[Verb], idle: str) -> Change:
    """The change that runs verbs (summary idle when there are none)."""
    if not verbs:
        return replace(step.base, summary=idle)
    systemctl = str(step.params["systemctl"])
    said = ", ".join(what for what, _ in verbs if what)
    return replace(step.base, status="changed", summary=f"{name}: {said}",
                   actions=tuple(Run((systemctl, *args)) for _, args in verbs))


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
