"""One changing task's rack lock and audit record, together; end() keeps the lock until an
interrupted task's threads have finished
(docs/security.md#the-lock-never-lapses-while-an-interrupted-task-cleans-up).

    guard = Guard(inventory, "up", {"engine": "sglang", ...}, on_event=say)
    guard.begin(wait=None)       # LockHeld (exit 3): a refused record is written
    with audit.active(guard.record):
        ...                      # the task; note() adds what changed
    guard.end("ok")              # end record, lock released (one round trip)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.fleet.warm import discard, prewarm
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.oplock import audit
from sparkrack.oplock.lock import LockError, LockHeld, RackLock, call, interrupt_main
from sparkrack.oplock.remote import Holder

SETTLE_LIMIT = 180.0  # longest wait for an interrupted task's threads (a stop: up to 120 s)


class Guard:
    """The lock and the audit record of one task."""

    def __init__(self, inventory: Inventory, task: str, args: Mapping, *,
                 on_event: Callable[[str], None] = lambda e: None,
                 on_lost: Callable[[], None] = interrupt_main, token: str | None = None,
                 **lock_options):
        self.inventory = inventory
        self.on_event = on_event
        self.record = audit.new_record(inventory, task, args, token=token)
        start = self.record.start
        self.lock = RackLock(inventory, {
            "token": self.record.id, "operator": start["operator"], "pid": start["pid"],
            "task": task, "command": start["command"], "client_time": start["time"]},
            on_event=on_event, on_lost=on_lost, **lock_options)
        self.took_over: Holder | None = None
        self.headless: str | None = None  # why it runs without the lock
        self._hosts_stamp = _stamp(inventory.path / "hosts.yml")  # a head swap rewrites it
        self._closing: list[str] = []
        self._threads = set(threading.enumerate())  # those not the task's

    @property
    def lost(self) -> str | None:
        """Why the lock was lost during the task (None if it was kept)."""
        return self.lock.lost

    def begin(self, wait: float | None = None, *, headless: bool = False) -> None:
        """Take the lock and write the start record; LockHeld after writing a refused
        record (LockError, the head not answering: a refused record in the local copy,
        unless headless: then the task runs without the lock, its start in the local copy)."""
        # the task's connections open meanwhile; the head's is the lock's, lent once taken
        prewarm(self.inventory, [n for n in self.inventory.nodes
                                 if n.name != self.lock.home.name])
        try:
            self.took_over = self.lock.acquire(wait, self.record.start_line())
        except LockHeld as held:
            discard()
            self._refused(held)
            raise
        except LockError as error:  # the head did not answer: only the local copy can say it
            discard()
            if headless and error.head_unreachable:
                self._begin_headless(error)
                return
            audit.append_local(self.record.refused_line(error.line(), exit_code=error.exit_code))
            raise
        audit.append_local(self.record.start_line())
        self.record.lock = {"home": self.lock.home.name, "waited_s": round(self.lock.waited, 3)}
        if self.took_over is not None:
            old = self.took_over
            self.record.lock["took_over"] = {"id": old.token, "operator": old.operator,
                                             "pid": old.pid, "command": old.command,
                                             "no_heartbeat_s": old.age}
            self.on_event(f"lock: took over a stale lock from {old.describe(time.time())}")
            # the stale holder's record gets its end, so the log says what became of it
            self._closing.append(audit._line({
                "id": old.token, "phase": "end", "time": self.record.start["time"],
                "ts": self.record.start["ts"], "outcome": "interrupted",
                "error": f"no heartbeat for {old.age:.0f} s: the lock was taken over as stale "
                         f"by {self.record.start['operator']} ({self.record.command})"}))

    def resume(self, started: float) -> None:
        """Take the lock again under this record's token (Guard(token=...)), its start
        record written by a process that ended mid-task (a power cycle of its own node):
        no second start record; the end record then closes the first. started: that
        start's unix time. LockHeld when another task holds the lock meanwhile."""
        self.record.started = time.monotonic() - max(0.0, time.time() - started)
        self.lock.acquire(None, "")
        self.record.lock = {"home": self.lock.home.name, "resumed": True}

    def _begin_headless(self, error: LockError) -> None:
        self.headless = error.message
        self.record.lock = {"home": None, "headless": self.headless}
        audit.append_local(self.record.start_line())
        self.on_event(f"lock: none taken ({self.headless}): this task runs without it; its "
                      "record goes to this machine's audit copy and to the head it leaves")

    def _refused(self, held: LockHeld) -> None:
        line = self.record.refused_line(held.line())
        try:
            call(self.lock._fleet, self.lock.home.name, "append", lines=[line],
                 directory=self.lock.directory)
        except Exception as error:  # noqa: BLE001 - the refusal stands; say what was lost
            self.on_event(f"audit: the refusal could not be logged on the head: {error}")
        finally:
            self.lock._fleet.close()
        audit.append_local(line)

    def end(self, outcome: str, *, error: str | None = None, exit_code: int = 0) -> None:
        """Once the task's own threads ended (see the module doc), write the end record and
        release the lock (one round trip), and the local copy."""
        discard()  # connections the task did not use
        self._settle(SETTLE_LIMIT)
        line = self.record.end_line(outcome, error=error, exit_code=exit_code)
        problem = None if self.headless else self.lock.release([*self._closing, line])
        if problem:
            self.on_event(f"lock: {problem}")
        problem = self._tell_new_head(line)
        if problem:
            self.on_event(f"audit: {problem}")
        local = audit.append_local(*self._closing, line)
        if local:
            self.on_event(f"audit: {local}")

    def _tell_new_head(self, line: str) -> str | None:
        """The end record also to the head the inventory names now, when the task replaced
        the head (its start record came with the audit log it moved there)."""
        if _stamp(self.inventory.path / "hosts.yml") == self._hosts_stamp:
            return None
        try:
            now = load_inventory(self.inventory.path)
        except SparkrackError:
            return None
        if now.head.name == self.inventory.head.name:
            return None
        try:
            with Fleet(now, [now.head]) as fleet:
                call(fleet, now.head.name, "append", lines=[line])
        except LockError as error:
            return f"the end record not logged on the new head: {error.line()}"
        return None

    def _settle(self, limit: float) -> None:
        """Wait up to limit s for the threads the task started that still work (not daemon
        threads: SSH transports, the heartbeat), the lock kept meanwhile. A Ctrl-C here
        does not end the wait: the process could not exit before those threads anyway."""
        deadline = time.monotonic() + limit
        said = False
        while time.monotonic() < deadline:
            busy = [t for t in threading.enumerate() if t not in self._threads and not t.daemon
                    and t is not threading.current_thread() and t.is_alive()]
            if not busy:
                return
            if not said:
                said = True
                self.on_event(f"lock: kept while {len(busy)} thread(s) of this task finish "
                              f"(stopping containers?), up to {limit:.0f} s")
            try:
                busy[0].join(min(1.0, max(0.0, deadline - time.monotonic())))
            except KeyboardInterrupt:
                self.on_event("lock: the task's threads are still at work; the lock is "
                              "released when they end")


def _stamp(path: Path) -> tuple[int, int] | None:
    """path's (mtime, size), None if it cannot be read."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size
