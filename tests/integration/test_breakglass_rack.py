"""Break-glass on the rehearsal rack: the head (spark-01, which holds the rack lock, the
audit log and the deployment records) loses power while SGLang serves. `down` fails closed;
`break-glass` stops every worker's rank and records it here and on every worker; it refuses
while the head answers; once the head is back, `down` clears what is left and moves the
record into the head's audit log. A head that is alive is never taken for gone: not behind
a changed host key, nor behind a partition that cuts only this machine off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stubgroup import nothing_runs

from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes
from sparkrack.oplock.audit import parse_lines, verify_chain
from sparkrack.oplock.breakfold import BREAK_GLASS_FILE
from sparkrack.oplock.remote import AUDIT_FILE

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
REASON = "spark-01 lost power; the workers hold their memory"


def invoke(state: Path, *args: str) -> subprocess.CompletedProcess:
    """`invoke ARGS -i inventory/rehearsal` as an operator runs it, with its own local state."""
    env = {**os.environ, "SPARKRACK_SANDBOX": "1", "SPARKRACK_STATE_DIR": str(state),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", "inventory/rehearsal"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


def test_break_glass_stops_the_workers_of_a_lost_head_and_records_it(engine_rack, rack,
                                                                      tmp_path):
    inventory = engine_rack
    head = inventory.head.name
    workers = [n for n in inventory.nodes if n.name != head]
    lanes.up(inventory, "sglang", "512k")
    try:
        refused = invoke(tmp_path, "break-glass", REASON, "--yes")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.strip() == (f"error: {head} (the head) answers: the rack lock can "
                                          "be taken (invoke down (break-glass is for a "
                                          "head that is gone))"), refused.stderr
        assert len(nothing_runs(inventory)) == 8  # a refusal touches nothing

        rack.poweroff(head)
        closed = invoke(tmp_path, "down")
        assert closed.returncode != 0 and f"rack lock on {head}" in closed.stderr, closed.stderr
        with Fleet(inventory, workers) as fleet:
            assert len(fleet.docker(workers[0].name).containers(
                labels=["sparkrack.engine"])) == 1  # down changed nothing

        done = invoke(tmp_path, "break-glass", REASON, "--yes", "--timeout", "3",
                      "--grace", "6")
        assert done.returncode == 0, done.stdout + done.stderr
        said = done.stdout + done.stderr
        assert f"{head} (the head) does not answer" in said
        assert "watching it for 6 s, from here and from 7 worker(s)" in said
        assert f"{head}: not reached" in said
        assert "break-glass: 7 rank(s) stopped" in said
        assert f"once {head} answers: invoke down" in said
        with Fleet(inventory, workers) as fleet:
            left = {n.name: fleet.docker(n.name).containers(labels=["sparkrack.engine"])
                    for n in workers}
            assert not any(left.values()), left  # stopped and removed on every worker
            records = fleet.run(["cat", BREAK_GLASS_FILE])
        local = parse_lines((tmp_path / "audit.jsonl").read_text())
        assert verify_chain((tmp_path / "audit.jsonl").read_text()).ok
        mine = [r for r in local if r.get("task") == "break-glass"]
        assert len(mine) == 1 and mine[0]["outcome"] == "ok"
        assert mine[0]["changed"]["reason"] == REASON
        assert mine[0]["changed"]["nodes"] == [n.name for n in workers]
        assert mine[0]["changed"]["unreachable"] == [head]
        for result in records:  # the same record on every worker the break-glass reached
            assert result.ok, result.error
            assert json.loads(result.stdout.splitlines()[-1])["id"] == mine[0]["id"]
            assert verify_chain(result.stdout).ok  # chained there by the lock script
    finally:
        rack.poweron(head)
        rack.wait_booted([rack.node(head)])
    cleared = invoke(tmp_path, "down")
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    said = cleared.stdout + cleared.stderr
    assert f"1 break-glass record(s) moved into {head}'s audit log" in said
    assert nothing_runs(inventory) == []
    with Fleet(inventory) as fleet:
        log = fleet.run(["cat", AUDIT_FILE])[head]
        left = fleet.run(["test", "-e", BREAK_GLASS_FILE])
    assert verify_chain(log.stdout).ok
    on_head = [r for r in parse_lines(log.stdout) if r.get("id") == mine[0]["id"]]
    assert len(on_head) == 1 and on_head[0]["changed"]["reason"] == REASON  # once, not 7 times
    assert on_head[0]["folded_from"] == [n.name for n in workers]  # and from where
    assert [r.exit_code for r in left] == [1] * 8  # and gone from every node


def _workers_running(inventory) -> dict[str, list[str]]:
    """The engine containers running on every worker (the head may refuse this machine)."""
    workers = [n for n in inventory.nodes if n.name != inventory.head.name]
    with Fleet(inventory, workers) as fleet:
        return {n.name: [c.name for c in fleet.docker(n.name).containers(
            labels=["sparkrack.engine"]) if c.status == "running"] for n in workers}


def test_break_glass_never_takes_a_live_head_for_gone(engine_rack, rack, tmp_path):
    """Issue 46 item 7: the head alive behind a changed host key (really regenerated on the
    node, sshd restarted), then alive for its workers but cut off from this machine: each
    is refused with its own line, exit 2, and every worker's rank still runs."""
    inventory = engine_rack
    head = inventory.head.name
    lanes.up(inventory, "sglang", "512k")
    try:
        rack.rekey(head)
        try:
            refused = invoke(tmp_path, "break-glass", REASON, "--yes", "--grace", "3")
            running = _workers_running(inventory)
        finally:
            rack.rekey(head, restore=True)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = refused.stderr.strip()
        assert said.startswith(f"error: {head} (the head) is there but refuses this machine: "
                               f"{head} (10.77.1.11): host key CHANGED since it was recorded"), said
        assert "break-glass stopped nothing" in said
        assert all(len(names) == 1 for names in running.values()), running

        rack.isolate(head)
        try:
            refused = invoke(tmp_path, "break-glass", REASON, "--yes", "--grace", "3")
            running = _workers_running(inventory)
        finally:
            rack.isolate(head, on=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = refused.stderr.strip()
        assert said.startswith(f"error: {head} (the head) does not answer this machine ("
                               f"{head} (10.77.1.11): no answer within"), said
        assert "reaches it (10.77.1.11:22 accepted the connection): a partition between this " \
               "machine and the head, not a lost head" in said
        assert all(len(names) == 1 for names in running.values()), running
        assert not (tmp_path / "audit.jsonl").exists()  # nothing done, nothing recorded
        assert len(nothing_runs(inventory)) == 8  # the head's rank 0 too
    finally:
        lanes.down(inventory)
