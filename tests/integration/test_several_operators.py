"""Issue 11 on the rehearsal rack: one operator at a time, a record of every change, and a
dead node found within seconds. Every task runs as a real `invoke` process (two operators
are two processes), the lock lives on the head node (spark-01), the audit log is read back
with `invoke log --json`. Each test leaves the rack without an engine and the lock free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkrack.deployments.ranks import engine_containers
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def operator(engine_rack, rack, tmp_path):
    """start(*argv) / run(*argv): `python -m invoke ARGV` against the rehearsal inventory,
    with this test's own local state; the rack left with no engine and the lock free."""
    env = {**os.environ, "SPARKRACK_INVENTORY": str(engine_rack.path), "NO_COLOR": "1",
           "SPARKRACK_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPARKRACK_LOCK_DIR", None)

    def start(*argv: str, merged: bool = False) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "invoke", *argv], cwd=REPO, env=env,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                                text=True)

    def run(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
        process = start(*argv)
        out, err = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    def free() -> None:
        deadline = time.monotonic() + 60
        while run("lock").returncode != 0:
            assert time.monotonic() < deadline, run("lock").stdout
            time.sleep(1)

    lanes.down(engine_rack)
    free()
    yield start, run
    for node in engine_rack.nodes:
        rack.heal(node.name)
    free()
    lanes.down(engine_rack)


def log_entries(run, since: float) -> list[dict]:
    done = run("log", "--json")
    assert done.returncode == 0, done.stderr
    return [e for e in json.loads(done.stdout) if e.get("ts", 0) >= since - 1]


def engines_on_rack(inventory) -> set[str]:
    with Fleet(inventory) as fleet:
        ranks, errors = engine_containers(fleet)
    assert not errors
    return {r.engine for r in ranks}


def test_two_ups_started_together_exactly_one_starts(operator, engine_rack):
    start, run = operator
    began = time.time()
    first = start("up", "--engine", "sglang")
    time.sleep(0.5)
    second = start("up", "--engine", "vllm")
    outs = {name: (p.wait(timeout=240), *p.communicate()) for name, p in
            (("sglang", first), ("vllm", second))}
    codes = {name: out[0] for name, out in outs.items()}
    assert sorted(codes.values()) == [0, 3], outs
    winner, loser = ("sglang", "vllm") if codes["sglang"] == 0 else ("vllm", "sglang")
    refusal = outs[loser][2].strip()
    assert len(refusal.splitlines()) == 1, refusal
    assert refusal.startswith("error: the rack lock is held by ") and \
        f"`up --engine {winner}" in refusal, refusal
    assert engines_on_rack(engine_rack) == {winner}  # nothing of the refused one
    entries = log_entries(run, began)
    ups = {e["command"].split()[2]: e for e in entries if e.get("task") == "up"}
    assert ups[winner]["outcome"] == "ok" and ups[loser]["outcome"] == "refused"
    assert len(ups[winner]["changed"]["containers"]) == 8
    assert ups[winner]["changed"]["deployment"].startswith(f"{winner}-512k-")
    assert ups[winner]["duration_s"] > 0 and ups[winner]["inventory_digest"]
    print("\n".join(["two operators:", f"  {winner}: exit 0", f"  {loser}: exit 3: {refusal}"]))


def test_up_is_refused_while_restart_rack_holds_the_lock(operator):
    start, run = operator
    began = time.time()
    restart = start("restart-rack", "--batch-size", "4")  # the head (rank 0) in batch 2
    deadline = time.monotonic() + 60
    while True:
        shown = run("lock")
        if shown.returncode == 3 and "restart-rack" in shown.stdout:
            break
        assert time.monotonic() < deadline and restart.poll() is None, shown.stdout
        time.sleep(0.3)
    refused = run("up", "--engine", "sglang")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "`restart-rack --batch-size 4`" in refused.stderr, refused.stderr
    assert restart.wait(timeout=300) == 0, restart.communicate()
    entries = log_entries(run, began)
    outcomes = [(e["task"], e["outcome"]) for e in entries if e["task"] in ("up", "restart-rack")]
    assert ("restart-rack", "ok") in outcomes and ("up", "refused") in outcomes


def test_a_killed_holder_of_this_machine_loses_the_lock_at_once(operator):
    """A holder killed outright (SIGKILL: no release, no end record) on this machine: its
    process is gone, so the next task here takes the lock over at once instead of waiting
    out the 20 s heartbeat timeout (another machine's holder still gets those 20 s:
    tests/unit/oplock/test_oplock_lock.py)."""
    start, run = operator
    began = time.time()
    holder = start("burn", "--seconds", "90")
    deadline = time.monotonic() + 60
    while "burn --seconds 90" not in run("lock").stdout:
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.3)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    killed = time.monotonic()
    taker = run("provision", timeout=240)
    took = time.monotonic() - killed
    assert taker.returncode == 0, taker.stderr
    assert "took over a stale lock from" in taker.stderr and "burn --seconds 90" in taker.stderr
    assert took < 15, took  # well inside the 20 s a heartbeat timeout would take
    entries = log_entries(run, began)
    burn = next(e for e in entries if e["task"] == "burn")
    provision = next(e for e in entries if e["task"] == "provision")
    assert burn["outcome"] == "interrupted" and "taken over as stale" in burn["error"]
    assert provision["lock"]["took_over"]["id"] == burn["id"]


def test_a_node_cut_during_the_burn_gate_is_named_within_10_s(operator, engine_rack, rack,
                                                               monkeypatch, gate_burn):
    """The burn gate runs a 10 s burn; spark-05's cable is pulled 2 s into it. spark-05 must
    be named lost within 10 s of the cut (the operator reads it at once: events.node_lost),
    and the gate then refuses it as unreachable while the other nodes finish their burn."""
    import threading

    from sparkrack.core import events
    from sparkrack.safety.burn import burn

    when: dict[str, float] = {}
    said: list[str] = []
    monkeypatch.setattr(events, "_said", {})  # an earlier test may have lost spark-05 too

    def heard(message: str) -> None:
        if "spark-05" in message and "lost" not in when:
            when["lost"] = time.monotonic()
            said.append(message)

    events.on_node_lost(heard)

    @gate_burn
    def burn_then_cut(inventory, nodes, fleet=None):
        def cut():
            rack.cut("spark-05")
            when["cut"] = time.monotonic()
        timer = threading.Timer(2.0, cut)
        timer.start()
        try:
            return burn(inventory, nodes, seconds=10, fleet=fleet)
        finally:
            when["burned"] = time.monotonic()
            timer.cancel()

    events: list[str] = []
    try:
        with pytest.raises(lanes.Refused) as refused:
            lanes.up(engine_rack, "sglang", "512k", on_event=events.append)
    finally:
        rack.heal("spark-05")
    named = when["lost"] - when["cut"]
    assert named < 10, (named, said, events)
    assert "spark-05" in str(refused.value), str(refused.value)
    assert engines_on_rack(engine_rack) == set()
    print(f"spark-05 cut 2 s into a 10 s burn gate: named after {named:.1f} s ({said[0]}); "
          f"the gate refused after {when['burned'] - when['cut']:.1f} s:\n{refused.value}")


def test_run_respects_the_lock_and_the_head_keeps_the_log_to_itself(operator):
    """Issue 23 items 3, 5 and 11 on the rehearsal rack: `invoke run` is refused (exit 3,
    naming the holder) while a burn holds the lock, runs with --force (recorded); the
    head's lock directory is 0700 and its audit log 0600, a password on a recorded command
    line is masked, and `invoke log --verify` finds the chain intact."""
    start, run = operator
    began = time.time()
    holder = start("burn", "--seconds", "15")
    deadline = time.monotonic() + 60
    while "burn --seconds 15" not in run("lock").stdout:
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.3)
    refused = run("run", "--limit", "spark-01", "--", "true")
    assert refused.returncode == 3, refused.stderr
    assert "held by " in refused.stderr and "burn --seconds 15" in refused.stderr
    forced = run("run", "--force", "--limit", "spark-01", "--", "stat", "-c", "%a %n",
                 "/var/lib/sparkrack", "/var/lib/sparkrack/audit.jsonl")
    assert forced.returncode == 0, forced.stderr
    assert "700 /var/lib/sparkrack\n" in forced.stdout
    assert "600 /var/lib/sparkrack/audit.jsonl\n" in forced.stdout
    assert holder.wait(timeout=120) == 0, holder.communicate()
    assert run("run", "--limit", "spark-01", "--shell", "true -p S3cret-x").returncode == 0
    entries = [e for e in log_entries(run, began) if e["task"] == "run"]
    assert [e["outcome"] for e in entries] == ["refused", "ok", "ok"]
    assert entries[1]["overrides"][0].startswith("run --force: the rack lock was held by ")
    assert "S3cret" not in json.dumps(entries) and "-p ***" in entries[2]["command"]
    verified = run("log", "--verify")
    assert verified.returncode == 0 and "the chain holds" in verified.stdout, verified
