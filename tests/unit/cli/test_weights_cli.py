"""`invoke weights.*` refuses bad input in one line naming the flag and the fix, exit 2,
before touching any node (--check runs take no lock, so no node is asked at all)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("argv, message", [
    (["weights.stage", "--model", "rel/x", "--check"],
     "error: --model 'rel/x' is not an absolute path (give the model directory's absolute "
     "path on the nodes"),
    (["weights.stage", "--model", "/models/a:b", "--check"], "error: --model '/models/a:b' holds ':'"),
    (["weights.stage", "--from", "spark-01", "--source", "/tmp", "--check"],
     "error: --from and --source both given (name one source"),
    (["weights.stage", "--source", "/nonexistent-model", "--check"],
     "error: --source /nonexistent-model: not a directory on this machine"),
    (["weights.stage", "--from", "spark-99", "--check"],
     "error: --from spark-99: no such node in"),
    (["weights.stage", "--bwlimit", "fast", "--check", "--source", "/tmp"],
     "error: --bwlimit fast: not a number of MiB/s (give MiB/s, 0 or more, e.g. --bwlimit 500)"),
    (["weights.remove", "--check"], "error: weights.remove needs --model PATH"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    env = {**os.environ, "SPARKRACK_INVENTORY": str(REPO / "inventory" / "rehearsal")}
    done = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
