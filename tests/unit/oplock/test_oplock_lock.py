"""The rack lock against a real sshd on loopback (loopback.py): spark-01 (127.0.0.1) is the
head; the lock directory is a temp folder, the local state another one per "machine"."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from loopback import Sshd, inventory, needs_sshd, session_pids

from sparkrack.fleet import Fleet
from sparkrack.oplock import audit
from sparkrack.oplock import lock as lock_module
from sparkrack.oplock.guard import Guard
from sparkrack.oplock.identity import operator
from sparkrack.oplock.lock import (
    LockError,
    LockHeld,
    RackLock,
    call,
    ended_here,
    held,
    lease_while_down,
)
from sparkrack.oplock.remote import Holder

pytestmark = needs_sshd


@pytest.fixture
def loopback_rack(sshd: Sshd, tmp_path: Path):
    inv = tmp_path / "inventory"
    inv.mkdir()
    (inv / "hosts.yml").write_text("sparks: {}\n")
    return inventory(sshd, ("spark-01",), connect_timeout=1.0, path=inv)


@pytest.fixture(autouse=True)
def no_lock_left_held():
    """A lock a test leaves held (a holder "killed" without release) is this process's no
    more once the test ends: the next test, of any module, runs as a process holding none."""
    before = list(lock_module._held)
    yield
    lock_module._held[:] = before


@pytest.fixture
def lock_dir(tmp_path: Path) -> str:
    return str(tmp_path / "head" / "var-lib-sparkrack")


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """machine("a") makes the next locks and records act as if on machine a (its own
    local state folder)."""
    def on(name: str) -> Path:
        path = tmp_path / f"state-{name}"
        monkeypatch.setenv("SPARKRACK_STATE_DIR", str(path))
        return path
    on("a")
    return on


def holder(token: str, command: str = "up --engine sglang") -> dict:
    return {"token": token, "operator": "alice@laptop", "pid": os.getpid(), "task": "up",
            "command": command}


def new_lock(loopback_rack, lock_dir, token, lost=None, **options) -> RackLock:
    return RackLock(loopback_rack, holder(token, options.pop("command", "up --engine sglang")),
                    directory=lock_dir, on_lost=lost or (lambda: None), **options)


def show(loopback_rack, lock_dir):
    with Fleet(loopback_rack, [loopback_rack.head]) as fleet:
        return call(fleet, loopback_rack.head.name, "show", directory=lock_dir)


def test_take_refuse_release(loopback_rack, lock_dir, machine):
    first = new_lock(loopback_rack, lock_dir, "a" * 32)
    assert first.acquire() is None
    assert held() is first
    try:
        machine("b")  # another laptop: its local lock is free, the head's is not
        second = new_lock(loopback_rack, lock_dir, "b" * 32, command="up --engine vllm")
        asked, ask = [], second._call
        second._call = lambda op, *args, **kw: asked.append(op) or ask(op, *args, **kw)
        with pytest.raises(LockHeld) as refused:
            second.acquire()
        assert asked == ["take"]  # refused at once: one ask, no wait, no retry (not timed:
        # one SSH round trip on a busy machine can take seconds)
        message = refused.value.line()
        assert refused.value.exit_code == 3
        assert message.startswith(f"the rack lock is held by alice@laptop (pid {os.getpid()}) "
                                  "running `up --engine sglang` since ")
        assert re.search(r"; last heartbeat [0-4] s ago\)", message), message  # fresh, busy host
        assert message.endswith("(wait for it with --wait SECONDS; `invoke lock` shows it)")
        data = json.loads(Path(lock_dir, "lock.json").read_text())
        assert data["token"] == "a" * 32 and abs(data["since"] - time.time()) < 5
    finally:
        assert first.release() is None
    assert held() is None
    assert show(loopback_rack, lock_dir).status == "FREE"


def test_same_machine_queues_on_the_local_lock(loopback_rack, lock_dir):
    first = new_lock(loopback_rack, lock_dir, "a" * 32)
    first.acquire()
    try:
        second = new_lock(loopback_rack, lock_dir, "b" * 32)
        with pytest.raises(LockHeld) as refused:
            second.acquire()  # refused by the local lock, named from the head's
        assert "alice@laptop" in refused.value.line()
    finally:
        first.release()


def test_wait_queues_until_the_holder_releases(loopback_rack, lock_dir, machine):
    first = new_lock(loopback_rack, lock_dir, "a" * 32)
    first.acquire()
    threading.Timer(1.5, first.release).start()
    machine("b")
    said: list[str] = []
    second = RackLock(loopback_rack, holder("b" * 32), directory=lock_dir, on_event=said.append,
                      on_lost=lambda: None)
    assert second.acquire(wait=20) is None
    try:
        assert 1.0 < second.waited < 10
        assert said and said[0].startswith("lock: waiting up to 20 s for alice@laptop")
    finally:
        second.release()


def test_wait_gives_up_at_its_deadline(loopback_rack, lock_dir, machine):
    first = new_lock(loopback_rack, lock_dir, "a" * 32)
    first.acquire()
    try:
        machine("b")
        started = time.monotonic()
        with pytest.raises(LockHeld) as refused:
            new_lock(loopback_rack, lock_dir, "b" * 32).acquire(wait=1.5)
        waited = time.monotonic() - started
        assert 1.4 < waited < 5
        said = re.search(r"after waiting (\d+) s", refused.value.line())
        assert said and 1 <= int(said[1]) <= round(waited), refused.value.line()
    finally:
        first.release()


def test_a_dead_holder_loses_the_lock_after_the_timeout(loopback_rack, lock_dir, machine):
    dead = new_lock(loopback_rack, lock_dir, "a" * 32)
    dead.acquire()
    dead._stop.set()  # its heartbeat stops as if killed (SIGKILL: no release, no record)
    machine("b")
    with pytest.raises(LockHeld):
        new_lock(loopback_rack, lock_dir, "b" * 32, stale_after=2).acquire()  # not stale yet
    time.sleep(3.2)
    taker = new_lock(loopback_rack, lock_dir, "c" * 32, stale_after=2)
    stale = taker.acquire()
    try:
        assert stale is not None and stale.token == "a" * 32 and stale.operator == "alice@laptop"
        assert stale.age >= 3
        # the dead holder, were it to wake up, finds the lock gone
        assert dead._call("refresh", dead.token, "0", timeout=5).status == "LOST"
        assert dead.release() == "the rack lock was no longer ours at the end"
        assert show(loopback_rack, lock_dir).holder.token == "c" * 32  # its release took nothing
    finally:
        taker.release()


def test_a_holder_of_this_machine_whose_process_ended_is_taken_over_at_once(
        loopback_rack, lock_dir, machine):
    """Found by the chaos run (seed 1, step 37): a roll ended while the head was off, so it
    could not release; once the head answered again, every command of the same operator
    was refused for 20 s by a holder that no longer existed."""
    ended = subprocess.Popen(["true"])
    ended.wait()  # a pid that has ended
    mine = {**holder("a" * 32), "operator": operator(), "pid": ended.pid}
    dead = RackLock(loopback_rack, mine, directory=lock_dir, on_lost=lambda: None)
    dead.acquire()
    dead._stop.set()  # it ended without release (its head did not answer)
    machine("b")
    taker = new_lock(loopback_rack, lock_dir, "c" * 32)
    taken = taker.acquire()  # no wait for the heartbeat to go stale
    try:
        assert taken is not None and taken.token == "a" * 32 and taken.pid == ended.pid
        assert show(loopback_rack, lock_dir).holder.token == "c" * 32
    finally:
        taker.release()
    machine("c")
    alive = RackLock(loopback_rack, {**holder("b" * 32), "operator": operator()},
                     directory=lock_dir, on_lost=lambda: None)  # os.getpid(): alive
    alive.acquire()
    alive._stop.set()
    machine("d")
    with pytest.raises(LockHeld):  # a live process of this machine keeps its lock
        new_lock(loopback_rack, lock_dir, "d" * 32).acquire()
    # another machine's holder with that pid: its process cannot be judged from here
    assert not ended_here(Holder("e" * 32, "bob@other", ended.pid, "up", "", 0.0, 0.0, 0.0))


def test_a_broken_lock_stops_its_holder(loopback_rack, lock_dir):
    stopped = threading.Event()
    holder_lock = new_lock(loopback_rack, lock_dir, "a" * 32, lost=stopped.set, heartbeat=0.3)
    holder_lock.acquire()
    try:
        with Fleet(loopback_rack, [loopback_rack.head]) as fleet:
            assert call(fleet, "spark-01", "break", "f" * 32,
                        directory=lock_dir).status == "MISMATCH"  # another token: kept
            assert call(fleet, "spark-01", "break", "a" * 32,
                        directory=lock_dir).status == "BROKEN"
        assert stopped.wait(5)
        assert holder_lock.lost.startswith("the lock was broken or taken over on spark-01")
    finally:
        holder_lock.release()


def test_a_holder_that_cannot_reach_the_head_stops_its_task(loopback_rack, lock_dir, sshd):
    stopped = threading.Event()
    holder_lock = new_lock(loopback_rack, lock_dir, "a" * 32, lost=stopped.set, heartbeat=0.3,
                           give_up_after=2.0)
    holder_lock.acquire()
    frozen = [sshd.pid, *session_pids(sshd)]
    for pid in frozen:  # the head stops answering: open connection and new ones alike
        os.kill(pid, signal.SIGSTOP)
    try:
        assert stopped.wait(10)
        assert "no heartbeat reached spark-01" in holder_lock.lost
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        holder_lock.release()


def test_the_heartbeat_outlives_giving_up_until_the_cleanup_ends(loopback_rack, lock_dir, sshd,
                                                                 machine):
    """Issue 23 item 10: a holder that gave up (the head silent) stops its task once, and
    its heartbeat goes on trying: the head back, the lock stays fresh through the task's
    cleanup (no other operator can take it as stale) until release."""
    lost: list[float] = []
    holder_lock = new_lock(loopback_rack, lock_dir, "a" * 32, lost=lambda: lost.append(1),
                           heartbeat=0.3, give_up_after=1.0)
    holder_lock.acquire()
    frozen = [sshd.pid, *session_pids(sshd)]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 15
        while not lost and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    try:
        assert lost, "the holder never gave up"
        machine("b")
        for _ in range(10):  # the interrupted task's cleanup: longer than stale_after
            time.sleep(1)
            with pytest.raises(LockHeld):
                new_lock(loopback_rack, lock_dir, "b" * 32, stale_after=6).acquire()
        assert lost == [1]  # stopped once, not again at every missed beat
    finally:
        assert holder_lock.release() is None
    assert show(loopback_rack, lock_dir).status == "FREE"


def test_an_interrupted_task_keeps_the_lock_fresh_through_its_cleanup(loopback_rack, lock_dir,
                                                                       machine, monkeypatch):
    """Ctrl-C: the task's cleanup runs holding the lock (heartbeat fresh) and the end record
    follows it."""
    from functools import partial

    from sparkrack.cli import common
    from sparkrack.oplock import guard as guard_module

    monkeypatch.setattr(common, "inventory_from", lambda path: loopback_rack)
    monkeypatch.setattr(guard_module, "Guard", partial(guard_module.Guard, directory=lock_dir,
                                                       heartbeat=0.3))
    ages: list[float] = []

    def task():
        try:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(10)
        except KeyboardInterrupt:
            for _ in range(6):  # stopping containers
                time.sleep(1)
                ages.append(show(loopback_rack, lock_dir).holder.age)
            raise

    with pytest.raises(KeyboardInterrupt):
        common._guarded("down", {"inventory": None}, None, task)
    assert len(ages) == 6 and max(ages) <= 2, ages
    [entry] = audit.merge(audit.parse_lines(Path(lock_dir, "audit.jsonl").read_text()))
    assert (entry["task"], entry["outcome"], entry["exit_code"]) == ("down", "interrupted", 130)
    assert entry["duration_s"] >= 6


def test_the_lock_is_kept_until_an_interrupted_tasks_threads_end(loopback_rack, lock_dir,
                                                                 machine):
    """Issue 23 item 10: Ctrl-C twice while `with ThreadPoolExecutor` waits for a docker stop
    leaves the worker stopping containers after the task's main thread gave up; the lock
    stays held, its heartbeat fresh, until that worker ended, and only then is released."""
    said: list[str] = []
    guard = Guard(loopback_rack, "down", {}, directory=lock_dir, on_lost=lambda: None,
                  on_event=said.append, heartbeat=0.3)
    guard.begin()
    stopped = threading.Event()

    def stop_containers():  # a worker the interrupted main thread left running
        time.sleep(8)
        stopped.set()

    threading.Thread(target=stop_containers, name="ThreadPoolExecutor-0_0").start()
    seen: list = []

    def watch():  # another operator's view while the worker runs
        while not stopped.is_set():
            try:
                holder = show(loopback_rack, lock_dir).holder
            except LockError:
                if stopped.is_set():  # a look that ended after the worker counts for nothing
                    return
                raise
            if not stopped.is_set():  # a look that ended after the worker may see it released
                seen.append(holder and holder.age)
            time.sleep(1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    guard.end("interrupted", error="interrupted (Ctrl-C or a signal)", exit_code=130)
    assert stopped.is_set()  # end() returned only after the worker ended
    watcher.join(60)  # its last look ended before the loopback node goes away
    assert not watcher.is_alive()
    # refreshed all along (every 0.3 s): without it the age would reach 8 s; the margin is
    # for a busy machine, where a refresh or a look over SSH can take seconds
    assert len(seen) >= 3 and all(age is not None and age <= 4 for age in seen), seen
    assert show(loopback_rack, lock_dir).status == "FREE"
    assert any("kept while 1 thread(s) of this task finish" in line for line in said), said
    [entry] = audit.merge(audit.parse_lines(Path(lock_dir, "audit.jsonl").read_text()))
    assert entry["outcome"] == "interrupted" and entry["duration_s"] >= 7


def test_lease_keeps_the_lock_while_the_head_reboots(loopback_rack, lock_dir, machine):
    holder_lock = new_lock(loopback_rack, lock_dir, "a" * 32)
    holder_lock.acquire()
    try:
        with lease_while_down(["spark-01"], 120):
            shown = show(loopback_rack, lock_dir).holder
            assert shown.age < -100  # heartbeat put ahead: not stale for two minutes
            machine("b")
            with pytest.raises(LockHeld) as refused:
                new_lock(loopback_rack, lock_dir, "b" * 32, stale_after=1).acquire()
            assert "heartbeat leased for" in refused.value.line()
        with lease_while_down(["spark-02"], 120):  # not the lock's home: nothing to do
            assert show(loopback_rack, lock_dir).holder.age < -100
    finally:
        holder_lock.release()


# --- Guard: the lock and the audit record together -------------------------------------------


def test_guard_writes_start_and_end_records_on_the_head_and_locally(loopback_rack, lock_dir,
                                                                    machine, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz")
    guard = Guard(loopback_rack, "up",
                  {"engine": "sglang", "hf_token": "x", "note": "hf_abcdefghijklmnopqrstuvwxyz"},
                  directory=lock_dir, on_lost=lambda: None)
    guard.begin()
    with audit.active(guard.record):
        audit.note(deployment="sglang-512k-1", nodes=["spark-01"], containers=["r0@spark-01"],
                   overrides=["power: override"])
    guard.end("ok")
    head = audit.parse_lines(Path(lock_dir, "audit.jsonl").read_text())
    local = audit.parse_lines(audit.local_path().read_text())
    assert head == local
    start, end = head
    assert (start["phase"], end["phase"], start["id"], end["id"]) == ("start", "end", guard.record.id,
                                                                      guard.record.id)
    assert start["operator"] and start["task"] == "up" and start["rack"] == "sparkrack"
    assert start["inventory_digest"].startswith("sha256:")
    assert start["args"] == {"engine": "sglang", "hf_token": "***", "note": "***"}
    assert "hf_abc" not in Path(lock_dir, "audit.jsonl").read_text()
    assert audit.verify_chain(Path(lock_dir, "audit.jsonl").read_text()) == audit.ChainCheck(2, 0)
    assert audit.verify_chain(audit.local_path().read_text()) == audit.ChainCheck(2, 0)
    assert end["outcome"] == "ok" and end["changed"]["deployment"] == "sglang-512k-1"
    assert end["overrides"] == ["power: override"] and end["duration_s"] >= 0
    assert not Path(lock_dir, "lock.json").exists()


def test_refused_and_interrupted_records(loopback_rack, lock_dir, machine):
    first = Guard(loopback_rack, "restart-rack", {}, directory=lock_dir, on_lost=lambda: None)
    first.begin()
    first.lock._stop.set()  # then killed: no end record from it
    machine("b")
    second = Guard(loopback_rack, "up", {"engine": "vllm"}, directory=lock_dir,
                   on_lost=lambda: None)
    with pytest.raises(LockHeld):
        second.begin()
    third = Guard(loopback_rack, "down", {}, directory=lock_dir, on_lost=lambda: None,
                  stale_after=1)
    time.sleep(2.2)
    third.begin()  # takes over the stale lock, closes the dead holder's record
    third.end("interrupted", error="interrupted (Ctrl-C or a signal)", exit_code=130)
    entries = audit.merge(audit.parse_lines(Path(lock_dir, "audit.jsonl").read_text()))
    assert [(e["task"], e["outcome"]) for e in entries] == [
        ("restart-rack", "interrupted"), ("up", "refused"), ("down", "interrupted")]
    dead, refused, taker = entries
    assert "taken over as stale by" in dead["error"]
    assert refused["command"] == "up --engine vllm" and "restart-rack" in refused["error"]
    assert taker["lock"]["took_over"]["id"] == first.record.id


def test_a_task_whose_process_ended_mid_way_is_resumed_under_its_own_record(
        loopback_rack, lock_dir, machine):
    """Issue 53: the watchdog cut its own node's power mid-task (its lock leased, its start
    record written); the service started again after the boot takes the lock back under the
    same token and closes the same record: one audit entry, no second start."""
    first = Guard(loopback_rack, "watchdog.power-cycle", {"node": "spark-01"},
                  directory=lock_dir, on_lost=lambda: None)
    first.begin()
    with lease_while_down(["spark-01"], 300):
        first.lock._stop.set()  # the power goes: no end record, no more heartbeats,
        first.lock._release_local()  # no process holding the node's local lock file
    again = Guard(loopback_rack, "watchdog.power-cycle", {"node": "spark-01"},
                  directory=lock_dir, on_lost=lambda: None, token=first.record.id)
    again.resume(first.record.start["ts"])
    with audit.active(again.record):
        audit.note(power_cycled=["spark-01"], restarted="sglang-512k-2")
    again.end("ok")
    lines = audit.parse_lines(Path(lock_dir, "audit.jsonl").read_text())
    assert [(e["id"], e["phase"]) for e in lines] == [(first.record.id, "start"),
                                                     (first.record.id, "end")]
    [entry] = audit.merge(lines)
    assert entry["outcome"] == "ok" and entry["changed"]["restarted"] == "sglang-512k-2"
    assert entry["lock"]["resumed"] is True
    assert not Path(lock_dir, "lock.json").exists()
    # another task took the lock meanwhile: the resume is refused, nothing is taken from it
    other = Guard(loopback_rack, "up", {}, directory=lock_dir, on_lost=lambda: None)
    other.begin()
    try:
        machine("b")
        late = Guard(loopback_rack, "watchdog.power-cycle", {}, directory=lock_dir,
                     on_lost=lambda: None, token=first.record.id)
        with pytest.raises(LockHeld):
            late.resume(first.record.start["ts"])
    finally:
        other.end("ok")


def test_a_head_that_does_not_answer_refuses_and_is_logged_locally(sshd, tmp_path, machine):
    from loopback import free_port
    inv = tmp_path / "inventory-down"
    inv.mkdir()
    (inv / "hosts.yml").write_text("x")
    down = inventory(sshd, ("spark-01",), port=free_port(), path=inv)
    guard = Guard(down, "provision", {}, directory=str(tmp_path / "nowhere"))
    with pytest.raises(LockError) as refused:
        guard.begin()
    assert refused.value.exit_code == 1 and "connection refused" in refused.value.line()
    [entry] = audit.merge(audit.parse_lines(audit.local_path().read_text()))
    assert (entry["task"], entry["outcome"], entry["exit_code"]) == ("provision", "refused", 1)


def test_a_headless_task_runs_without_the_lock_only_while_the_head_does_not_answer(
        sshd, tmp_path, machine, loopback_rack, lock_dir):
    """`onboard --replace` of a head that is gone: no lock can be taken there, so the task
    runs without it, recorded in the local copy; a head that answers still refuses."""
    from loopback import free_port
    inv = tmp_path / "inventory-down"
    inv.mkdir()
    (inv / "hosts.yml").write_text("x")
    down = inventory(sshd, ("spark-01",), port=free_port(), path=inv)
    events: list[str] = []
    guard = Guard(down, "onboard", {"replace": "spark-01"}, on_event=events.append,
                  directory=str(tmp_path / "nowhere"))
    guard.begin(headless=True)
    assert guard.headless.startswith("rack lock on spark-01: ") and \
        "connection refused" in guard.headless
    assert events[-1].startswith("lock: none taken (rack lock on spark-01: ")
    guard.end("ok")
    start, end = audit.parse_lines(audit.local_path().read_text())
    assert (start["phase"], start["task"], end["phase"], end["outcome"]) == \
        ("start", "onboard", "end", "ok")
    assert end["lock"] == {"home": None, "headless": guard.headless}
    assert not (tmp_path / "nowhere").exists()  # nothing was taken or released anywhere

    first = new_lock(loopback_rack, lock_dir, "t-first")
    first.acquire(None, "")
    try:
        held = Guard(loopback_rack, "onboard", {}, directory=lock_dir)
        with pytest.raises(LockHeld):
            held.begin(headless=True)
    finally:
        first.release()
