"""The CLI side of issue 11: which tasks take the lock, how outcomes are recorded, exit code
3, --wait, and `invoke log` (no node: the guard is a fake, the log the local copy)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from invoke import Context
from invoke.exceptions import Exit

from sparkrack.cli import (
    common,
    facts_tasks,
    lock_tasks,
    onboard_tasks,
    power_tasks,
    provision_tasks,
    serve_tasks,
    status_tasks,
    watch_tasks,
)
from sparkrack.cli.common import rack_task
from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.oplock import guard as guard_module
from sparkrack.oplock.lock import LockHeld

REHEARSAL = str(Path(__file__).resolve().parents[3] / "inventory" / "rehearsal")


class FakeGuard:
    made: list[FakeGuard] = []
    refuse: str | None = None

    def __init__(self, inventory, task, args, *, on_event=None, **options):
        self.inventory, self.task, self.args = inventory, task, args
        self.lost = None
        self.begun = self.ended = None
        self.record = type("R", (), {"note": lambda *a, **k: None})()
        FakeGuard.made.append(self)

    def begin(self, wait=None, headless=False):
        self.begun, self.headless = wait, headless
        if FakeGuard.refuse:
            raise LockHeld(FakeGuard.refuse)

    def end(self, outcome, *, error=None, exit_code=0):
        self.ended = (outcome, error, exit_code)


@pytest.fixture(autouse=True)
def fake_guard(monkeypatch):
    FakeGuard.made, FakeGuard.refuse = [], None
    monkeypatch.setattr(guard_module, "Guard", FakeGuard)


@rack_task(changing=lambda a: not a["check"])
def change(c, inventory=REHEARSAL, how="ok", check=False):
    """A task that changes the rack unless --check."""
    if not check:
        assert common.inventory_from(inventory) is FakeGuard.made[-1].inventory  # loaded once
    if how == "exit1":
        raise Exit(code=1)
    if how == "refused":
        from sparkrack.lifecycle.lanes import Refused

        raise Refused("up refused:\n  memory: low")
    if how == "usage":
        raise UsageError("bad flag")
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "crash":
        raise RuntimeError("boom")
    return how


def test_onboard_may_run_headless_only_when_it_replaces_the_head(monkeypatch):
    from sparkrack.onboard.context import OnboardReport

    monkeypatch.setattr("sparkrack.onboard.onboard", lambda *a, **k: OnboardReport(
        "spark-09", "10.77.1.19", k.get("replace"), False))
    for replace, headless in (("spark-01", True), ("spark-05", False), (None, False)):
        onboard_tasks.onboard(Context(), "spark-09", "10.77.1.19", replace=replace,
                              inventory=REHEARSAL, json=True)
        assert FakeGuard.made[-1].headless is headless, replace


@pytest.mark.parametrize("how, outcome, code", [
    ("ok", "ok", 0), ("exit1", "failed", 1), ("refused", "refused", 1),
    ("usage", "refused", 2), ("interrupt", "interrupted", 130), ("crash", "failed", 1)])
def test_outcomes_are_recorded(how, outcome, code):
    if how == "ok":
        assert change(Context(), how=how, wait="30") == "ok"
    else:
        with pytest.raises((Exit, RuntimeError)) as raised:
            change(Context(), how=how, wait="30")
        if isinstance(raised.value, Exit):
            assert raised.value.code == code
    [guard] = FakeGuard.made
    assert guard.task == "change" and guard.begun == 30.0
    assert guard.args == {"inventory": REHEARSAL, "how": how, "check": False}
    assert guard.ended[0] == outcome and guard.ended[2] == code


def test_read_only_variants_take_no_lock():
    assert change(Context(), how="ok", check=True) == "ok"
    assert FakeGuard.made == []


def test_a_held_lock_is_one_line_and_exit_code_3():
    FakeGuard.refuse = "bob@ci (pid 7) running `up --engine vllm` since 14:02:31 (3 s ago)"
    with pytest.raises(Exit) as raised:
        change(Context())
    assert raised.value.code == 3
    assert raised.value.message == (
        "error: the rack lock is held by bob@ci (pid 7) running `up --engine vllm` since "
        "14:02:31 (3 s ago) (wait for it with --wait SECONDS; `invoke lock` shows it)")
    assert "\n" not in raised.value.message
    assert FakeGuard.made[0].ended is None  # the guard wrote its refused record itself


def test_a_lost_lock_stops_the_task_with_its_reason():
    @rack_task()
    def long(c, inventory=REHEARSAL):
        FakeGuard.made[-1].lost = "no heartbeat reached spark-01 for 15 s"
        raise KeyboardInterrupt

    with pytest.raises(Exit) as raised:
        long(Context())
    assert raised.value.code == 1
    assert raised.value.message.startswith(
        "error: long stopped: lost the rack lock: no heartbeat reached spark-01 for 15 s")
    assert FakeGuard.made[0].ended[0] == "interrupted"


def _changing(task) -> bool:
    return "wait" in task.argspec(task.body).parameters


def test_every_changing_task_takes_the_lock_and_no_reader_does():
    changing = [serve_tasks.up, serve_tasks.down, serve_tasks.roll, watch_tasks.watch,
                provision_tasks.provision, provision_tasks.unprovision, power_tasks.burn,
                power_tasks.restart_rack, power_tasks.reboot, onboard_tasks.onboard,
                watch_tasks.install, watch_tasks.uninstall]
    readers = [status_tasks.status, facts_tasks.facts, serve_tasks.plan, power_tasks.power,
               lock_tasks.lock, lock_tasks.log_, watch_tasks.status]
    assert all(_changing(t) for t in changing)
    assert not any(_changing(t) for t in readers)


def test_log_reads_the_local_copy_with_filters(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path))
    now = time.time()
    lines = [
        {"id": "old", "phase": "start", "task": "up", "ts": now - 7200, "time": "t0",
         "rack": "rehearsal", "command": "up --engine sglang"},
        {"id": "old", "phase": "end", "ts": now - 7100, "time": "t1", "outcome": "ok"},
        {"id": "new", "phase": "start", "task": "up", "ts": now - 60, "time": "t2",
         "rack": "rehearsal", "command": "up --engine vllm", "operator": "bob@ci"},
        {"id": "prov", "phase": "start", "task": "provision", "ts": now - 30, "time": "t3",
         "rack": "rehearsal"},
        {"id": "other", "phase": "start", "task": "up", "ts": now - 10, "time": "t4",
         "rack": "another-rack"},
    ]
    (tmp_path / "audit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    lock_tasks.log_(Context(), since="1h", task="up", json=True, local=True, inventory=REHEARSAL)
    entries = json.loads(capsys.readouterr().out)
    assert [(e["id"], e["outcome"], e["operator"]) for e in entries] == [
        ("new", "interrupted", "bob@ci")]
    lock_tasks.log_(Context(), local=True, inventory=REHEARSAL)
    table = capsys.readouterr().out
    assert "up --engine sglang" in table and "provision" in table and "another-rack" not in table
    with pytest.raises(Exit) as raised:
        lock_tasks.log_(Context(), since="someday", local=True, inventory=REHEARSAL)
    assert raised.value.code == 2


def test_log_verify_names_the_first_broken_line(tmp_path, monkeypatch, capsys):
    """Issue 23 item 11: `invoke log --verify` exits 1 naming the line; 0 when intact."""
    from sparkrack.oplock import audit

    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path))
    (tmp_path / "audit.jsonl").write_text('{"id":"legacy","phase":"end"}\n')
    audit.append_local('{"id":"a","phase":"start"}', '{"id":"a","phase":"end"}',
                       '{"id":"b","phase":"start"}')
    lock_tasks.log_(Context(), local=True, verify=True, inventory=REHEARSAL)
    said = capsys.readouterr().out
    assert said.strip() == ("audit log (local): the chain holds: 3 line(s) verified; line 1 "
                            "was written before the chain and not verified")
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"phase":"end"', '"phase":"end","outcome":"ok"')
    (tmp_path / "audit.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(Exit) as raised:
        lock_tasks.log_(Context(), local=True, verify=True, inventory=REHEARSAL)
    assert raised.value.code == 1
    assert raised.value.message.startswith("audit log (local): line 4 does not follow line 3")


def test_unlock_needs_a_reason():
    with pytest.raises(Exit) as raised:
        lock_tasks.unlock(Context(), force=None, inventory=REHEARSAL)
    assert raised.value.code == 2 and "needs a reason" in raised.value.message


def test_errors_are_sparkrack_errors():
    assert issubclass(LockHeld, SparkrackError) and LockHeld("x").exit_code == 3
