"""Break-glass without the rack (the rack test: tests/integration/test_breakglass_rack.py):
what it refuses before touching any node, the hint a lock on a lost head gives, and (on the
loopback sshd) a head that answers in any way is never taken for gone."""

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import loopback
import pytest
from loopback import needs_sshd

from sparkrack import remote
from sparkrack.core.errors import UsageError
from sparkrack.fleet.reach import Reach
from sparkrack.fleet.results import FleetResult, NodeResult
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.lifecycle import breakglass
from sparkrack.lifecycle.breakglass import break_glass
from sparkrack.lifecycle.headgone import HeadNotGone, Look, confirm_gone, judge
from sparkrack.oplock import audit
from sparkrack.oplock.breakfold import BREAK_GLASS_FILE, FROM, fold_records
from sparkrack.oplock.lock import LockError, call

REPO = Path(__file__).resolve().parents[3]


def test_without_a_terminal_it_needs_yes_and_touches_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "invoke", "break-glass", "head lost", "-i",
                           "inventory/rehearsal"], cwd=REPO, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60,
                          env={**os.environ, "SPARKRACK_STATE_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("error: break-glass stops engines without the rack lock: "
                                   "confirm it (add --yes (no terminal to ask on))")
    assert not (tmp_path / "audit.jsonl").exists()


def test_a_reason_is_required_before_any_node_is_asked():
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    with pytest.raises(UsageError, match="break-glass needs a reason"):
        break_glass(inventory, "  ")


class _LostHead:
    def run(self, commands, **kwargs):
        return {name: NodeResult(name, "unreachable", error=f"{name}: connection refused")
                for name in commands}


def test_a_lock_on_a_lost_head_points_at_break_glass_and_the_head_swap():
    with pytest.raises(LockError) as raised:
        call(_LostHead(), "spark-01", "show")
    assert raised.value.line() == (
        "rack lock on spark-01: spark-01: connection refused (if spark-01 is gone for "
        "good, `invoke break-glass REASON` stops the engines on the nodes that answer, and "
        "`invoke onboard NEW --address ADDR --replace spark-01` puts a spare in its place)")
    assert raised.value.head_unreachable


class _Rack:
    """A fleet whose nodes hold break-glass files; the head's lock script appends."""

    def __init__(self, files: dict[str, str], head_answers: bool = True):
        self.files = files
        self.head_answers = head_answers
        self.appended: list[str] = []
        self.removed: list[str] = []

    def run(self, commands, *, timeout=None, stdin=None):
        if not isinstance(commands, dict):
            return FleetResult(tuple(NodeResult(n, "ok", 0, stdout=text)
                                     for n, text in self.files.items()))
        results = {}
        for node, argv in commands.items():
            if argv[:2] == ["rm", "-f"]:
                self.removed.append(node)
                results[node] = NodeResult(node, "ok", 0)
            elif self.head_answers:  # the lock script's append
                self.appended += stdin.decode().splitlines()
                results[node] = NodeResult(node, "ok", 0, stdout="APPENDED\n")
            else:
                results[node] = NodeResult(node, "unreachable", error=f"{node}: timed out")
        return FleetResult(tuple(results.values()))


def _record(ident: str, ts: float, **more) -> str:
    return json.dumps({"id": ident, "ts": ts, "task": "break-glass", **more},
                      separators=(",", ":"), sort_keys=True)


def _chained(*lines: str) -> str:
    """A node's break-glass file as the lock script's append writes it: each line chained."""
    text, previous = "", ""
    for line in lines:
        previous = audit.chain(previous, line)
        text += previous + "\n"
    return text


def _folded(line: str, *nodes: str) -> str:
    return json.dumps({**json.loads(line), FROM: list(nodes)}, separators=(",", ":"),
                      sort_keys=True)


def test_records_found_on_several_nodes_reach_the_head_log_once_oldest_first():
    rack = _Rack({"spark-02": _chained(_record("b", 2), _record("a", 1)),
                  "spark-03": _chained(_record("b", 2)), "spark-04": ""})
    moved, problems = fold_records(rack, "spark-01")
    assert (moved, problems) == (2, [])
    assert rack.appended == [_folded(_record("a", 1), "spark-02"),
                             _folded(_record("b", 2), "spark-02", "spark-03")]
    assert rack.removed == ["spark-02", "spark-03"]  # only where a record was


def test_records_stay_on_the_nodes_when_the_head_does_not_take_them():
    rack = _Rack({"spark-02": _chained(_record("a", 1))}, head_answers=False)
    moved, problems = fold_records(rack, "spark-01")
    assert moved == 0 and rack.removed == []
    assert problems == ["break-glass records not moved to spark-01's audit log: rack lock on "
                        "spark-01: spark-01: timed out (if spark-01 is gone for good, `invoke "
                        "break-glass REASON` stops the engines on the nodes that answer, and "
                        "`invoke onboard NEW --address ADDR --replace spark-01` puts a spare in its "
                        "place)"]


def test_a_workers_records_are_folded_only_verified_masked_and_marked_with_their_node(
        monkeypatch):
    """Issue 46 item 13: a worker's file is its word. A file whose chain is broken stays on
    its node, unfolded; another task's record is not folded; secrets are masked; every
    folded record names the nodes it came from, and copies that differ are each folded."""
    monkeypatch.setenv("HF_TOKEN", "hf_operatorsowntokenvalue")
    edited = _chained(_record("a", 1), _record("b", 2), _record("c", 3)).splitlines()
    edited[1] = edited[1].replace('"ts":2', '"ts":2.5')
    secret = _record("d", 4, reason="token hf_ABCDEFGHIJKLMNOPQRSTU, pw hf_operatorsowntokenvalue",
                     changed={"password": "S3cret", "nodes": ["spark-03"]})
    rack = _Rack({"spark-02": "\n".join(edited) + "\n",
                  "spark-03": _chained(secret, _record("e", 5), _record("x", 6, task="up")),
                  "spark-04": _chained(_record("e", 5, reason="another story"))})
    moved, problems = fold_records(rack, "spark-01")
    folded = [json.loads(line) for line in rack.appended]
    assert moved == 3 and [(r["id"], r[FROM]) for r in folded] == [
        ("d", ["spark-03"]), ("e", ["spark-03"]), ("e", ["spark-04"])]
    assert folded[0]["reason"] == "token ***, pw ***"
    assert folded[0]["changed"] == {"password": "***", "nodes": ["spark-03"]}
    assert "hf_" not in "".join(rack.appended) and "S3cret" not in "".join(rack.appended)
    assert problems == [
        "spark-02: its break-glass records were not folded (left in "
        f"{BREAK_GLASS_FILE}): audit log (spark-02:{BREAK_GLASS_FILE}): line 3 does not "
        "follow line 2: one of them was edited, or lines were removed or inserted between "
        "them",
        f"spark-03: a record of task 'up' in {BREAK_GLASS_FILE} (id x) was not folded",
        "break-glass record e differs between nodes (spark-03; spark-04): each version "
        "folded, marked with its nodes"]
    assert rack.removed == ["spark-04"]  # spark-02's and spark-03's files are left to look at


# --- Issue 46 item 7: only when the head is really gone ----------------------------------


@pytest.fixture
def nothing_stopped(monkeypatch, tmp_path):
    """break_glass with every act on the workers recorded instead of done (and this
    machine's audit copy in tmp_path): what it would have stopped or written."""
    acts = []
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(breakglass, "engine_containers",
                        lambda fleet: acts.append(("containers", fleet.nodes)) or ([], {}))
    monkeypatch.setattr(breakglass, "_record_on_nodes",
                        lambda fleet, line, report, on_event: acts.append(("record", line)))
    return acts


def _loopback_rack(sshd, head: str, **head_changes) -> Inventory:
    """Loopback nodes head (rank 0), spark-02 and spark-03, the head's Node changed."""
    rack = loopback.inventory(sshd, (head, "spark-02", "spark-03"))
    nodes = (replace(rack.nodes[0], **head_changes), *rack.nodes[1:])
    return replace(rack, nodes=nodes)


@needs_sshd
def test_a_head_behind_a_changed_host_key_is_refused_and_nothing_stopped(sshd, nothing_stopped,
                                                                         tmp_path):
    rack = _loopback_rack(sshd, "spark-05")  # its recorded key is another one
    with pytest.raises(HeadNotGone) as refused:
        break_glass(rack, "head lost", grace=0)
    assert refused.value.exit_code == 2
    line = refused.value.line()
    assert line.startswith("spark-05 (the head) is there but refuses this machine: spark-05 "
                           f"(127.0.0.5:{sshd.port}): host key CHANGED since it was recorded")
    assert line.endswith("(break-glass stopped nothing: it is only for a head that answers "
                         "nothing, here and from its workers; once this machine gets in, "
                         "invoke down)")
    assert nothing_stopped == [] and not (tmp_path / "audit.jsonl").exists()


@needs_sshd
def test_a_head_that_refuses_the_login_or_the_connection_is_refused(sshd, nothing_stopped):
    stranger = sshd.directory / "stranger_ed25519"
    if not stranger.exists():
        loopback.keygen(stranger)
    with pytest.raises(HeadNotGone, match=r"refuses this machine: spark-01 \(127\.0\.0\.1:\d+\): "
                       r"user root refused key .*stranger_ed25519"):
        break_glass(_loopback_rack(sshd, "spark-01", key_file=stranger), "head lost", grace=0)
    port = loopback.free_port()  # nothing listens there: the head's kernel answers RST
    with pytest.raises(HeadNotGone, match=rf"refuses this machine: spark-01 \(127\.0\.0\.1:{port}"
                       r"\): connection refused on port \d+ \(is sshd running\?\)"):
        break_glass(_loopback_rack(sshd, "spark-01", port=port), "head lost", grace=0)
    assert nothing_stopped == []


def _look(here: str = "silent", **workers: str) -> Look:
    why = {"silent": "spark-01 (10.77.1.11): no answer within 1.5 s", "session": ""}
    return Look(Reach("spark-01", here, why.get(here, "spark-01: refused")),
                {name.replace("_", "-"): {"10.77.1.11:22": state, "10.77.3.11:22": "silent"}
                 for name, state in workers.items()})


def test_a_head_the_workers_still_reach_is_a_partition_not_a_lost_head():
    refusal = judge("spark-01", _look(spark_02="silent", spark_03="accepted"))
    assert refusal is not None and refusal.exit_code == 2
    assert refusal.line() == (
        "spark-01 (the head) does not answer this machine (spark-01 (10.77.1.11): no answer "
        "within 1.5 s), but spark-03 reaches it (10.77.1.11:22 accepted the connection): a "
        "partition between this machine and the head, not a lost head (break-glass stopped "
        "nothing: it is only for a head that answers nothing, here and from its workers; "
        "restore this machine's path to spark-01 (or its ansible_host, if that is wrong), "
        "then invoke down)")
    assert "10.77.1.11:22 refused the connection" in judge(
        "spark-01", _look(spark_02="refused")).line()  # its kernel answered: the head is up
    assert judge("spark-01", _look(spark_02="error EINVAL")).line().startswith(
        "spark-02 cannot tell whether it reaches spark-01 (10.77.1.11:22: error EINVAL)")
    assert judge("spark-01", _look(spark_02="silent", spark_03="silent")) is None
    assert judge("spark-01", _look()) is None  # no worker answered: nothing to stop anyway
    assert "answers: the rack lock can be taken" in judge("spark-01", _look("session")).line()


def test_the_head_must_stay_silent_for_the_whole_grace_period(tmp_path):
    rack = load_inventory(REPO / "inventory" / "rehearsal")
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    def rounds(*looks):
        queue = list(looks)
        return lambda: queue.pop(0)

    gone = confirm_gone(rack, grace=12, look=rounds(*[_look(spark_02="silent")] * 4),
                        sleep=sleep, clock=lambda: now[0])
    assert (gone.rounds, gone.seconds, slept) == (4, 12.0, [5.0, 5.0, 2.0])
    now[0], slept[:] = 0.0, []
    with pytest.raises(HeadNotGone, match="spark-02 reaches it"):
        confirm_gone(rack, grace=30, sleep=sleep, clock=lambda: now[0], look=rounds(
            _look(spark_02="silent"), _look(spark_02="silent"), _look(spark_02="accepted")))
    assert slept == [5.0, 5.0]  # refused at the first answer, not at the end
    assert confirm_gone(rack, grace=0, look=rounds(_look(spark_02="silent")),
                        sleep=sleep).rounds == 1


def test_a_worker_knocks_once_on_each_address_and_says_what_answered():
    """remote/knock.py as shipped, run here: a listener accepts, a closed port refuses, and a
    listener whose backlog is full drops the SYN (silent, as a powered-off host)."""
    with socket.socket() as open_port, socket.socket() as full, socket.socket() as filler:
        open_port.bind(("127.0.0.1", 0))
        open_port.listen(8)
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        filler.connect(full.getsockname())  # the one pending connection a backlog of 0 holds
        closed = loopback.free_port()
        targets = [f"127.0.0.1:{open_port.getsockname()[1]}", f"127.0.0.1:{closed}",
                   f"127.0.0.1:{full.getsockname()[1]}"]
        done = subprocess.run([sys.executable, "-c", remote.script("knock"), "1", *targets],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == dict(zip(targets, ["accepted", "refused", "silent"], strict=False))


def test_the_grace_flag_takes_seconds_only(tmp_path):
    done = subprocess.run([sys.executable, "-m", "invoke", "break-glass", "head lost", "--yes",
                           "--grace", "soon", "-i", "inventory/rehearsal"], cwd=REPO,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                          env={**os.environ, "SPARKRACK_STATE_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: --grace soon: not a number of seconds (give "
                                   "seconds, 0 or more, e.g. --grace 30)")
