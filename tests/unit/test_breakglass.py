"""Break-glass without the rack (the rack test: tests/integration/test_breakglass_rack.py):
what it refuses before touching any node, and the hint a lock on a lost head gives."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.errors import UsageError
from sparkrack.fleet.results import FleetResult, NodeResult
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle.breakglass import break_glass, fold_records
from sparkrack.oplock.lock import LockError, call

REPO = Path(__file__).resolve().parents[2]


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


def _record(ident: str, ts: float) -> str:
    return json.dumps({"id": ident, "ts": ts, "task": "break-glass"}, separators=(",", ":"),
                      sort_keys=True)


def test_records_found_on_several_nodes_reach_the_head_log_once_oldest_first():
    rack = _Rack({"spark-02": _record("b", 2) + "\n" + _record("a", 1) + "\n",
                  "spark-03": _record("b", 2) + "\n", "spark-04": ""})
    moved, problems = fold_records(rack, "spark-01")
    assert (moved, problems) == (2, [])
    assert rack.appended == [_record("a", 1), _record("b", 2)]
    assert rack.removed == ["spark-02", "spark-03"]  # only where a record was


def test_records_stay_on_the_nodes_when_the_head_does_not_take_them():
    rack = _Rack({"spark-02": _record("a", 1) + "\n"}, head_answers=False)
    moved, problems = fold_records(rack, "spark-01")
    assert moved == 0 and rack.removed == []
    assert problems == ["break-glass records not moved to spark-01's audit log: rack lock on "
                        "spark-01: spark-01: timed out (if spark-01 is gone for good, `invoke "
                        "break-glass REASON` stops the engines on the nodes that answer, and "
                        "`invoke onboard NEW --address ADDR --replace spark-01` puts a spare in its "
                        "place)"]
