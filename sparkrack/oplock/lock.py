"""The rack lock: a local file lock, then the lock file on the head kept alive by a heartbeat
thread; stale after STALE_AFTER without one, given up after GIVE_UP_AFTER
(docs/operators.md#how-the-lock-works).

    lock = RackLock(inventory, holder={"token": ..., "operator": ..., "task": "up", ...})
    previous = lock.acquire(wait=None, start_line=...)  # LockHeld (exit code 3) if held
    lock.release(end_lines)
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from filelock import FileLock, Timeout

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.fleet.warm import unlend
from sparkrack.inventory import Inventory
from sparkrack.oplock.identity import operator, state_dir
from sparkrack.oplock.remote import Holder, Reply, holder_json, lock_argv, parse_reply

HEARTBEAT = 5.0
STALE_AFTER = 20
GIVE_UP_AFTER = 15.0
WAIT_POLL = 1.0
TAKE_TIMEOUT = 20.0  # the script waits up to 10 s for the guard
BEAT_TIMEOUT = 4.0

_held: list[RackLock] = []  # the locks this process holds (at most one in practice)


class LockHeld(SparkrackError):
    """Another operator holds the rack lock. Exit code 3."""

    exit_code = 3
    outcome = "refused"

    def __init__(self, who: str, *, waited: float | None = None,
                 fix: str = "wait for it with --wait SECONDS; `invoke lock` shows it"):
        self.who = who
        after = f" after waiting {waited:.0f} s" if waited else ""
        super().__init__(f"the rack lock is held by {who}{after}", fix=fix)


class LockError(SparkrackError):
    """The lock could not be taken or kept (head unreachable, script error)."""

    head_unreachable = False  # the head did not answer at all (not: its script failed)


def live_holder(fleet: Fleet, head: str, *, timeout: float = TAKE_TIMEOUT) -> Holder | None:
    """Who holds the rack lock on head now, or None when it is free or stale (its holder
    stopped beating: the next task takes it over). LockError if the head cannot be asked."""
    holder = call(fleet, head, "show", timeout=timeout).holder
    return holder if holder is not None and holder.age <= STALE_AFTER else None


def held() -> RackLock | None:
    """The rack lock this process holds, if any."""
    return _held[-1] if _held else None


@contextmanager
def lease_while_down(nodes: Sequence[str], seconds: float) -> Iterator[None]:
    """Around a reboot of nodes: if the held lock lives on one of them, lease it for
    seconds (see RackLock.away); otherwise nothing."""
    lock = held()
    if lock is None or lock.home.name not in nodes:
        yield
        return
    with lock.away(seconds):
        yield


def interrupt_main() -> None:
    """Stop the task in the main thread as Ctrl-C would."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def ended_here(holder: Holder) -> bool:
    """Whether holder was a task of this machine's operator whose process is gone: the
    lock it names outlived its task (no need to wait STALE_AFTER for its heartbeat)."""
    if holder.operator != operator() or holder.pid is None:
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): alive
        return False
    return False


class RackLock:
    """The rack lock, held by this process for one task."""

    def __init__(self, inventory: Inventory, holder: dict, *,
                 on_event: Callable[[str], None] = lambda e: None,
                 on_lost: Callable[[], None] = interrupt_main,
                 heartbeat: float = HEARTBEAT, stale_after: int = STALE_AFTER,
                 give_up_after: float = GIVE_UP_AFTER, directory: str | None = None):
        self.inventory = inventory
        self.home = inventory.head
        self.holder = holder
        self.token: str = holder["token"]
        self.on_event = on_event
        self.on_lost = on_lost
        self.heartbeat, self.stale_after, self.give_up_after = heartbeat, stale_after, give_up_after
        self.directory = directory
        self.lost: str | None = None
        self.waited = 0.0
        # its own connection: one borrowed from another lock could close under it
        self._fleet = Fleet(inventory, [self.home], borrow=False)
        key = f"{inventory.vars.rack_name}-{self.home.address}-{self.home.port}"
        self._local_path = state_dir() / "locks" / f"{key.replace('/', '_')}.lock"
        self._local = FileLock(self._local_path, thread_local=False)  # the process holds it
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None
        self._extra = 0.0
        self._good_until = 0.0
        self._state = threading.Lock()
        self._ending = False

    # --- Taking ---------------------------------------------------------------------------

    def acquire(self, wait: float | None = None, start_line: str = "") -> Holder | None:
        """Take the lock (waiting up to wait seconds if held); append start_line to the head's
        audit log in the same round trip. Returns the stale holder taken over, if any.
        LockHeld if another operator holds it; LockError if the head cannot be asked."""
        started = time.monotonic()
        deadline = started + (wait or 0.0)
        self._take_local(wait, deadline)
        try:
            said, ended = "", None
            while True:
                reply = self._call("take", self.token, str(self.stale_after),
                                   lines=[holder_json(self.holder), start_line],
                                   timeout=TAKE_TIMEOUT)
                if reply.status == "TAKEN":
                    break
                if reply.status != "HELD" or reply.holder is None:
                    raise LockError(f"cannot take the rack lock on {self.home.name}: "
                                    f"{reply.error or reply.status}")
                if ended is None and ended_here(reply.holder):
                    # its task ended without releasing it (the head did not answer then):
                    # broken by its token only, so a live holder taking it meanwhile stays
                    if self._call("break", reply.holder.token,
                                  timeout=TAKE_TIMEOUT).status in ("BROKEN", "FREE"):
                        ended = reply.holder
                        continue
                who = reply.holder.describe(time.time())
                if wait is None or time.monotonic() >= deadline:
                    raise LockHeld(who, waited=time.monotonic() - started if wait else None)
                if reply.holder.token != said:
                    said = reply.holder.token
                    self.on_event(f"lock: waiting up to {wait:g} s for {who}")
                time.sleep(min(WAIT_POLL, max(0.0, deadline - time.monotonic())))
        except BaseException:
            self._release_local()
            self._fleet.close()
            raise
        self.waited = time.monotonic() - started
        self._fleet.lend(self.home.name)  # the task's fleets talk to the head on it too
        self._good_until = time.monotonic() + self.give_up_after
        _held.append(self)
        self._beats = threading.Thread(target=self._beat, name="rack-lock-heartbeat",
                                       daemon=True)
        self._beats.start()
        return reply.stale or ended

    def _take_local(self, wait: float | None, deadline: float) -> None:
        """The local lock; LockHeld naming the holder if another task here has it."""
        self._local_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._local.acquire(timeout=0)
        except Timeout:
            who = self._local_holder()
            if wait is None:
                raise LockHeld(who) from None
            self.on_event(f"lock: waiting up to {wait:g} s for {who}")
            try:
                self._local.acquire(timeout=max(0.0, deadline - time.monotonic()))
            except Timeout:
                raise LockHeld(self._local_holder(), waited=wait) from None
        sidecar = self._local_path.with_suffix(".holder.json")
        sidecar.write_text(json.dumps({**self.holder, "started": time.time()}))

    def _local_holder(self) -> str:
        """Who holds the lock while another task on this machine holds the local one: the
        head's holder if it has one, else what that task wrote beside the local lock."""
        try:
            reply = self._call("show", timeout=TAKE_TIMEOUT)
            if reply.holder is not None:
                return reply.holder.describe(time.time())
        except LockError:
            pass
        try:
            data = json.loads(self._local_path.with_suffix(".holder.json").read_text())
            since = time.strftime("%H:%M:%S", time.localtime(data.get("started", 0)))
            return (f"{data.get('operator', '?')} (pid {data.get('pid', '?')}) running "
                    f"`{data.get('command', '?')}` since {since} (on this machine, taking it)")
        except (OSError, ValueError):
            return "another sparkrack task on this machine"

    # --- Keeping --------------------------------------------------------------------------

    def _beat(self) -> None:
        """Refresh the heartbeat every HEARTBEAT s until release(); give up (on_lost, once)
        when the lock was taken from us (then stop beating: it is not ours) or no refresh
        reached the head for GIVE_UP_AFTER s. After giving up it goes on trying: the task's
        cleanup (stopping containers, up to minutes) runs before release(), and a head
        that answers again keeps the lock ours until then, never stale mid-cleanup."""
        while not self._stop.wait(self.heartbeat):
            sent = time.monotonic()
            extra = self._extra
            try:
                reply = self._call("refresh", self.token, str(int(extra)), timeout=BEAT_TIMEOUT)
            except Exception as error:  # noqa: BLE001 - any failure is a missed beat, never the end
                reply = Reply("ERROR", error=getattr(error, "message", None) or
                              f"{type(error).__name__}: {error}")
            if reply.status == "OK":
                self._good_until = sent + extra + self.give_up_after
                continue
            if reply.status == "LOST":
                now = reply.holder.describe(time.time()) if reply.holder else "nobody"
                self._lose(f"the lock was broken or taken over on {self.home.name} (now held "
                           f"by {now})")
                return
            if time.monotonic() >= self._good_until and self.lost is None:
                self._lose(f"no heartbeat reached {self.home.name} for "
                           f"{time.monotonic() - self._good_until + self.give_up_after:.0f} s "
                           f"({reply.error or reply.status}); it goes stale there after "
                           f"{self.stale_after} s")

    def _lose(self, why: str) -> None:
        with self._state:
            if self._ending or self._stop.is_set() or self.lost is not None:
                return
            self.lost = why
        self.on_event(f"lock: LOST: {why}; stopping this task")
        self.on_lost()

    @contextmanager
    def away(self, seconds: float) -> Iterator[None]:
        """Lease the lock for seconds (the head is about to reboot): the heartbeat on the
        head is put seconds ahead now and by every refresh until the block ends."""
        reply = self._call("refresh", self.token, str(int(seconds)), timeout=TAKE_TIMEOUT)
        if reply.status != "OK":
            raise LockError(f"cannot lease the rack lock on {self.home.name} for its reboot: "
                            f"{reply.error or reply.status}")
        self._extra = seconds
        self._good_until = time.monotonic() + seconds + self.give_up_after
        self.on_event(f"lock: leased for {seconds:.0f} s while {self.home.name} reboots")
        try:
            yield
        finally:
            self._extra = 0.0

    # --- Releasing ------------------------------------------------------------------------

    def release(self, lines: Sequence[str] = ()) -> str | None:
        """Stop the heartbeat, remove the lock if still ours and append lines to the head's
        audit log, in one round trip. The problem as one line, or None."""
        with self._state:
            self._ending = True
        self._stop.set()
        if self._beats is not None:
            self._beats.join(BEAT_TIMEOUT + 1)
        if self in _held:
            _held.remove(self)
        try:
            reply = self._call("release", self.token, lines=lines, timeout=TAKE_TIMEOUT)
            if reply.status == "NOTOURS":
                return "the rack lock was no longer ours at the end"
            if reply.status != "RELEASED":
                return (f"could not release the rack lock on {self.home.name}: "
                        f"{reply.error or reply.status}; it goes stale after {self.stale_after} s")
            return None
        except LockError as error:
            return f"{error.message}; the lock goes stale after {self.stale_after} s"
        finally:
            unlend(self.home, self._fleet.known_hosts)
            self._release_local()
            self._fleet.close()

    def _release_local(self) -> None:
        if self._local.is_locked:
            self._local.release(force=True)

    # --- One operation --------------------------------------------------------------------

    def _call(self, op: str, *args: str, lines: Sequence[str] = (), timeout: float) -> Reply:
        """One lock operation on the head; LockError if the head cannot be asked."""
        return call(self._fleet, self.home.name, op, *args, lines=lines, timeout=timeout,
                    directory=self.directory)


def call(fleet: Fleet, head: str, op: str, *args: str, lines: Sequence[str] = (),
         timeout: float = TAKE_TIMEOUT, directory: str | None = None) -> Reply:
    """One lock operation on head through fleet (in remote.LOCK_DIR unless directory),
    lines (audit lines; take's holder JSON first) on its stdin; LockError if it could not
    run."""
    stdin = "".join(line + "\n" for line in lines if line).encode() if lines else None
    result = fleet.run({head: lock_argv(op, *args, directory=directory)}, timeout=timeout,
                       stdin=stdin)[head]
    reply = parse_reply(result.stdout)
    if result.status == "ok" and reply.status != "ERROR":
        return reply
    said = reply.error if reply.status == "ERROR" and result.stdout.strip() else ""
    lost = result.status == "unreachable"
    error = LockError(f"rack lock on {head}: {said or result.error or result.status}",
                      fix=f"if {head} is gone for good, `invoke break-glass REASON` stops the "
                      f"engines on the nodes that answer, and `invoke onboard NEW --address "
                      f"ADDR --replace {head}` puts a spare in its place" if lost else None)
    error.head_unreachable = lost
    raise error


__all__ = ["BEAT_TIMEOUT", "GIVE_UP_AFTER", "HEARTBEAT", "STALE_AFTER", "LockError", "LockHeld",
           "RackLock", "call", "held", "lease_while_down", "live_holder"]
