"""The watchdog's power cycle of a node, in one audit record (task `watchdog.power-cycle`)
under the rack lock: the group stopped in order, the pending restart kept in the service's
state file, the PDU's timed cycle of the outlet, then the node waited for and burned and
the group started again with `up`'s gates. When the node is the watchdog's own, its power
goes with the cut: the service, started again at boot, finishes the cycle (finish) under
the same record and lock token. The head keeps the last cycle for `invoke status`
(docs/watchdog.md#power-cycles-that-do-not-flap).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.record import write_power_cycle
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.powercycle import OFF_SECONDS, burned, plan_cycle, power_cycle
from sparkrack.lifecycle.restart import NODE_TIMEOUT, wait_back
from sparkrack.oplock import audit
from sparkrack.oplock.guard import Guard
from sparkrack.oplock.lock import LockError, LockHeld
from sparkrack.watchdog.cyclebook import Pending

TASK = "watchdog.power-cycle"
RESUME_WAIT_S = 60.0  # a resumed cycle waits at least this long for its node
RESUME_RETRY_S = 2.0  # between its tries of a head that does not answer yet
VOLATILE = ("tmpfs", "ramfs")  # filesystems a power cut empties


class Cycled(NamedTuple):
    """What the watchdog's power cycle did: ok when the node came back out of its cause
    and its group (if one ran) serves again."""

    ok: bool
    line: str
    cut: bool = False  # the outlet was cut
    restarted: str = ""  # the deployment started after it ("" none)
    done: bool = True  # False: nothing was done (the lock was held): no cycle to record
    started: bool | None = None  # the group started again (False: that failed; None: no
    #                              start was tried, the cycle itself failed or none ran)


def cycle_node(inventory: Inventory, node: str, cause: str, deployment, *, own: str | None,
               keep: Callable[[Pending], None], say: Callable[[str], None],
               by: str = "the watchdog", off_seconds: int = OFF_SECONDS) -> Cycled:
    """Power-cycle node for cause and start deployment (None: none ran) again; keep(pending)
    is called before the cut (it raises when it cannot keep it; the caller forgets it once
    this returns). Never raises: the watchdog goes on watching."""
    guard = Guard(inventory, TASK, {"node": node, "cause": cause, "off_seconds": off_seconds},
                  on_event=say)
    try:
        guard.begin(None)
    except SparkrackError as error:
        return Cycled(False, f"{node}: not power-cycled: {error.line()}", done=False)
    pending: list[Pending] = []

    def before_cut(boot_id: str) -> None:
        made = Pending(node, cause, guard.record.id, boot_id, time.time(),
                       guard.record.start["ts"], off_seconds, outlet,
                       deployment.engine if deployment else "",
                       deployment.profile if deployment else "",
                       deployment.deployment_id if deployment else "",
                       json.loads(json.dumps(guard.record.changed, default=str)))
        keep(made)  # raises when it cannot: then nothing is cut
        pending.append(made)
        _tell_head(inventory, made, by, "in progress", "outlet cut; the node boots", say)

    try:
        with audit.active(guard.record):
            target = inventory.node(node)
            with Fleet(inventory) as fleet:
                plan = plan_cycle(inventory, target, off_seconds, fleet)
            outlet = f"{plan.pdu}:{plan.outlet}"
            away = [inventory.head.name] if node == own else []  # the lock's keeper goes too
            line = power_cycle(inventory, target, plan, on_event=say, before_cut=before_cut,
                               away=away, silent=cause == "wedged")
    except Exception as error:  # noqa: BLE001 - any failure ends the record, never the loop
        said = _line(error)
        why = f"{node}: power cycle failed: {said}"
        guard.end("failed", error=said, exit_code=1)
        if pending:
            _tell_head(inventory, pending[0], by, "failed", why, say)
        return Cycled(False, why, cut=bool(pending))
    return _start_again(inventory, pending[0], guard, line, by, say)


def finish(inventory: Inventory, pending: Pending, *, say: Callable[[str], None],
           by: str = "the watchdog") -> Cycled:
    """Finish a cycle cut by a process that ended (the power of its own node): the lock taken
    again under the record's token, the node waited for (a new boot id, its cap unit active)
    and burned, the group started again, the one record ended. Never raises."""
    deadline = pending.decided + pending.off_seconds + NODE_TIMEOUT
    try:
        guard = _resumed(inventory, pending, max(RESUME_WAIT_S, deadline - time.time()), say)
    except SparkrackError as error:
        why = (f"{pending.node}: power-cycled, not finished: {error.line()}; start the group "
               "yourself (`invoke up`)")
        _tell_head(inventory, pending, by, "failed", why, say)
        return Cycled(False, why, cut=True)
    say(f"resuming the power cycle of {pending.describe()}")
    target = inventory.node(pending.node)
    try:
        with audit.active(guard.record):
            audit.note(**pending.changed)
            audit.note(nodes=[pending.node], power_cycled=[pending.node],
                       outlets=[pending.outlet], resumed=True)
            with Fleet(inventory, [target]) as fleet:
                wait_back(fleet, [target], {pending.node: pending.boot_id},
                          max(RESUME_WAIT_S, deadline - time.time()), say)
            line = burned(inventory, target)
    except Exception as error:  # noqa: BLE001 - any failure ends the record, never the loop
        said = _line(error)
        why = f"{pending.node}: power cycle failed: {said}"
        guard.end("failed", error=said, exit_code=1)
        _tell_head(inventory, pending, by, "failed", why, say)
        return Cycled(False, why, cut=True)
    return _start_again(inventory, pending, guard, line, by, say)


def _resumed(inventory: Inventory, pending: Pending, wait: float,
             say: Callable[[str], None]) -> Guard:
    """The cycle's guard, its lock taken again under its token: waiting up to wait seconds
    for a head that does not answer yet (this node just booted: its sshd may start after
    this service); LockHeld at once when another task holds the lock."""
    deadline = time.monotonic() + wait
    while True:
        guard = Guard(inventory, TASK, {"node": pending.node, "cause": pending.cause,
                                        "off_seconds": pending.off_seconds},
                      on_event=say, token=pending.token)
        try:
            guard.resume(pending.started)
            return guard
        except LockHeld:
            raise
        except LockError as error:
            if time.monotonic() >= deadline:
                raise
            say(f"the rack lock on {inventory.head.name} not reachable yet ({error.line()}); "
                "trying again")
            time.sleep(RESUME_RETRY_S)


def _start_again(inventory: Inventory, pending: Pending, guard: Guard, line: str, by: str,
                 say: Callable[[str], None]) -> Cycled:
    """The group the cycle stopped, started again in order under the cycle's record; the
    record ended; the head told."""
    from sparkrack.lifecycle.lanes import up

    restarted, outcome, error, started = "", "ok", None, None
    try:
        with audit.active(guard.record):
            if pending.engine:
                started = False  # until up() returns
                restarted = up(inventory, pending.engine, pending.profile,
                               on_event=say).deployment_id
                started = True
                audit.note(restarted=restarted)
                line += f"; {pending.engine} {pending.profile} started again in order"
            else:
                line += "; no group ran: none started"
    except Exception as failure:  # noqa: BLE001 - the start's gates or start: nothing runs
        error = _line(failure)
        outcome, line = "failed", f"{line}; the start after it failed: {error}"
    guard.end(outcome, error=error, exit_code=0 if error is None else 1)
    _tell_head(inventory, pending, by, outcome, line, say, restarted)
    return Cycled(error is None, line, cut=True, restarted=restarted, started=started)


def _line(error: Exception) -> str:
    """An error in one line (a refusal lists its gates on several)."""
    text = error.line() if isinstance(error, SparkrackError) else repr(error)
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def _tell_head(inventory: Inventory, pending: Pending, by: str, outcome: str, line: str,
               say: Callable[[str], None], restarted: str = "") -> None:
    """The head's power-cycle record (for `invoke status`); a head that does not answer is
    said, not fatal."""
    data = {"node": pending.node, "cause": pending.cause, "by": by, "time": pending.decided,
            "outcome": outcome, "line": line, "deployment": pending.deployment,
            "restarted": restarted, "record": pending.token}
    try:
        with Fleet(inventory, [inventory.head]) as fleet:
            write_power_cycle(fleet, inventory, data)
    except SparkrackError as error:
        say(f"the power-cycle record not written on {inventory.head.name}: {error.line()}")


def keeps_problem(state_file: Path | None, environ=os.environ,
                  mountinfo: str | None = None) -> str | None:
    """Why this service would not finish a cycle of its own node after the boot (None: it
    would): no state file, one a power cut empties or it cannot write, or no systemd to
    start it again (watch.install's unit is enabled at boot; systemd sets INVOCATION_ID
    for every unit it runs)."""
    if state_file is None:
        return "it keeps no state file"
    if not environ.get("INVOCATION_ID"):
        return "it does not run as a systemd unit (watch.install's): nothing starts it again"
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            mountinfo = ""
    kind = mount_type(str(state_file.parent), mountinfo)
    if kind in VOLATILE:
        return f"its state file {state_file} is on {kind}, which a power cut empties"
    if not os.access(state_file.parent, os.W_OK):
        return f"it cannot write its state file {state_file}"
    return None


def mount_type(path: str, mountinfo: str) -> str:
    """The filesystem type of the mount path is on, from /proc/self/mountinfo ('' unknown):
    the longest mount point that holds it, the last such line winning (mounts stack)."""
    best, kind = -1, ""
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        parts, types = head.split(), tail.split()
        if len(parts) < 5 or not types:
            continue
        point = parts[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, kind = len(point), types[0]
    return kind
