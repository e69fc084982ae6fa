"""Break-glass without the rack (the rack test: tests/integration/test_breakglass_rack.py):
what it refuses before touching any node, and the hint a lock on a lost head gives."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.errors import UsageError
from sparkrack.fleet.results import NodeResult
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle.breakglass import break_glass
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


def test_a_lock_on_a_lost_head_points_at_break_glass():
    with pytest.raises(LockError) as raised:
        call(_LostHead(), "spark-01", "show")
    assert raised.value.line() == (
        "rack lock on spark-01: spark-01: connection refused (if spark-01 is gone for "
        "good, `invoke break-glass REASON` stops the engines on the nodes that answer)")
