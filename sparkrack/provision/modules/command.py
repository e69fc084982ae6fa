"""command: one argv, run only while its guard says it is needed.

Every command has a guard (checked when the role is loaded): `creates` (a path that exists
once it ran) or `unless` (an argv that exits 0 once it ran). Absent mode skips it: a
command has no inverse. `settle: SECONDS` is for a command whose effect lands after it
returns (`netplan apply` hands the config to the network daemon): the `unless` guard must
then hold within that many seconds, on two checks a second apart, or the command fails. A
notified handler runs whatever its guard said: the guard was gathered before the change
that notified it. `always: true` is for a state no fact can show (the GPU clock lock:
nothing reads it back) and that is instant to set again: the command runs on every apply;
its `unless` guard says only whether this run puts back what was gone (a change, with the
guard's why) or re-applies what may still hold (a refresh, not counted as a change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from sparkrack.facts.files import file_query
from sparkrack.facts.provision import guard_query
from sparkrack.facts.queries import Query
from sparkrack.inventory.ranges import Range
from sparkrack.provision.changes import Change, Run
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.params import Param
from sparkrack.remote import text

SETTLE = Range(
    0, 300, "s", "no public figure: netplan hands the addresses to the network daemon, "
    "which sets them seconds after `netplan apply` returns (role fabric waits 20 s); the "
    "apply's SSH command is bounded by ssh_command_timeout (60 s by default) as well",
    below="a wait is longer than 0", over="a daemon catches up in seconds, not minutes",
    low_open=True)
PARAMS = {
    "argv": Param("list", "the command, one argument per item (no shell)",
                  ["systemctl", "daemon-reload"], required=True),
    "creates": Param("str", "a path that exists once the command ran: it runs while the "
                     "path is missing", "/var/lib/sparkrack/done"),
    "unless": Param("list", "a command that exits 0 once the command ran: it runs while "
                    "this fails", ["test", "-e", "/var/lib/sparkrack/done"]),
    "settle": Param("number", "seconds the unless guard may take to hold after the command "
                    "returns (checked twice, a second apart)", 20, range=SETTLE),
    "always": Param("bool", "run on every apply, for a state no fact shows; unless then "
                    "says whether the run put back what was gone", True),
}


def queries(p: Mapping[str, Any]) -> Iterable[Query]:
    """The guard's facts: the `creates` path, the `unless` argv's exit status."""
    if p.get("creates"):
        yield file_query(str(p["creates"]))
    if p.get("unless"):
        yield guard_query([str(a) for a in p["unless"]])


def check(p: Mapping[str, Any]) -> tuple[str, str] | None:
    """What involves several parameters: a command without a guard would run on every
    provision; always and settle need the unless guard."""
    if not ({"creates", "unless"} & set(p)):
        return "a command needs a guard to be idempotent", "add creates: PATH or unless: [ARGV]"
    if p.get("always") and not p.get("unless"):
        return ("always runs the command on every apply; its unless guard says whether the "
                "run puts back what was gone", "set always: true with unless: [ARGV]")
    if "settle" in p and not p.get("unless"):
        return "settle waits for the unless guard, and there is none", "add unless: [ARGV]"
    return None


def plan(step: Step) -> Change:
    """Run the argv unless its guard holds."""
    base, p, facts = step.base, step.params, step.facts
    argv = tuple(str(a) for a in p["argv"])
    if step.state.absent:
        return replace(base, status="skipped", summary="skipped: no inverse of a command")
    creates = p.get("creates")
    if creates and facts.file(str(creates)).exists:
        return replace(base, summary=f"{creates} exists")
    unless = p.get("unless")
    stale = base.handler  # its guard was gathered before the change that notified it
    if unless and not stale and facts.guards.get(tuple(str(a) for a in unless)) == 0:
        if p.get("always"):
            return replace(base, summary="re-applied on every run: " + " ".join(argv),
                           actions=(Run(argv),), refresh=True)
        return replace(base, summary="guard holds: " + " ".join(str(a) for a in unless))
    actions = [Run(argv)]
    if p.get("settle"):
        guard = [str(a) for a in unless]
        actions.append(Run(("sh", "-c", text("settle"), "settle", f"{p['settle']:g}", *guard),
                           shown=f"wait up to {p['settle']:g} s for the guard to hold"))
    why = facts.guard_reasons.get(tuple(str(a) for a in unless or ())) if not stale else None
    return replace(base, status="changed", summary="run " + " ".join(argv)
                   + (f" ({why})" if why else ""), actions=tuple(actions),
                   refresh=bool(p.get("always")))


MODULE = Module(
    name="command",
    params=PARAMS,
    queries=queries,
    check=check,
    plan=plan,
)
