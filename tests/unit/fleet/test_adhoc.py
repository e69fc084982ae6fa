"""`invoke run`: the argv after `--`, grouping of identical results (pure), and the whole
task against real sshd on loopback nodes (loopback_sshd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import Sshd, free_port, inventory, needs_sshd, write_inventory

from sparkrack.core.errors import UsageError
from sparkrack.fleet.adhoc import (
    command_argv,
    compress,
    group_results,
    remainder_of,
    render,
    run_adhoc,
)
from sparkrack.fleet.results import FleetResult, NodeResult

REPO = Path(__file__).resolve().parents[3]


# --- Pure --------------------------------------------------------------------------------


def test_the_command_is_every_word_after_the_first_double_dash():
    assert remainder_of(["invoke", "run", "-n", "spark-01", "--", "ls", "-l", "--", "a b"]) == [
        "ls", "-l", "--", "a b"]
    assert remainder_of(["invoke", "run"]) == []


def test_shell_line_is_one_argument_of_sh_c_and_both_or_neither_is_refused():
    assert command_argv([], "nvidia-smi -q | grep -i clock") == [
        "sh", "-c", "nvidia-smi -q | grep -i clock"]
    assert command_argv(["ibdev2netdev"], None) == ["ibdev2netdev"]
    for remainder, shell in (([], None), (["ls"], "ls"), ([], "  ")):
        with pytest.raises(UsageError):
            command_argv(remainder, shell)


@pytest.mark.parametrize("names, text", [
    (["spark-01", "spark-02", "spark-03", "spark-05", "spark-07", "spark-08"],
     "spark-[01-03,05,07-08]"),
    (["spark-04"], "spark-04"),
    (["spark-10", "spark-09", "spark-1"], "spark-[09-10],spark-1"),  # widths kept apart
    (["head", "spark-02", "spark-03"], "head,spark-[02-03]"),
])
def test_compress_writes_node_lists_as_dshbak(names, text):
    assert compress(names) == text


def result(node, status="ok", code=0, out="", err="", error=None) -> NodeResult:
    return NodeResult(node, status, code, out, err, error=error)


def test_identical_results_are_one_group_in_rank_order():
    results = FleetResult((
        result("spark-01", out="550.54\n"), result("spark-02", out="550.54\n"),
        result("spark-03", "failed", 1, "", "no GPU\n", error="spark-03 (...): exited 1"),
        result("spark-04", out="550.54\n"),
        result("spark-05", "unreachable", None, error="spark-05 (...): connection refused"),
        result("spark-06", "unreachable", None, error="spark-06 (...): no answer within 5 s"),
        result("spark-07", "failed", None, error="spark-07 (...): `sleep 9` timed out after 1 s")))
    groups = group_results(results)
    assert [(g.label, g.outcome) for g in groups] == [
        ("spark-[01-02,04]", "exit 0"), ("spark-03", "exit 1"),
        ("spark-[05-06]", "unreachable"), ("spark-07", "failed")]
    assert groups[1].errors == ()  # the exit code and stderr say it all
    assert [node for node, _ in groups[2].errors] == ["spark-05", "spark-06"]
    assert render(groups) == [
        "-" * 16, "spark-[01-02,04] (3 nodes): exit 0", "-" * 16, "550.54",
        "-" * 16, "spark-03 (1 node): exit 1", "-" * 16, "(stderr)", "no GPU",
        "-" * 16, "spark-[05-06] (2 nodes): unreachable", "-" * 16,
        "spark-05 (...): connection refused", "spark-06 (...): no answer within 5 s",
        "-" * 16, "spark-07 (1 node): failed", "-" * 16,
        "spark-07 (...): `sleep 9` timed out after 1 s"]


# --- Real SSH on loopback ----------------------------------------------------------------

# prints the address the node was reached on, and differs on spark-02 (exit 3)
BY_NODE = ('set -- $SSH_CONNECTION; case "$3" in 127.0.0.2) echo odd; echo oops >&2; exit 3;; '
           '*) echo same;; esac')


@needs_sshd
def test_run_groups_real_results_and_keeps_the_argv_intact(sshd: Sshd):
    rack = inventory(sshd)
    result = run_adhoc(rack, command_argv([], BY_NODE))
    groups = group_results(result)
    assert [(g.nodes, g.exit_code, g.stdout, g.stderr) for g in groups] == [
        (("spark-01", "spark-03"), 0, "same\n", ""), (("spark-02",), 3, "odd\n", "oops\n")]
    one = run_adhoc(rack, ["printf", "%s|", "a b", "$(hostname)", "it's"], nodes="spark-03")
    assert [(r.node, r.stdout) for r in one] == [("spark-03", "a b|$(hostname)|it's|")]


@needs_sshd
def test_run_task_end_to_end_json_text_and_exit_codes(sshd: Sshd, tmp_path: Path):
    rack = write_inventory(sshd, tmp_path / "inv", ("spark-01", "spark-02", "spark-03", "spark-04"),
                           ports={"spark-04": free_port()})

    head_log = tmp_path / "head"  # the loopback "head" is this machine: keep its log here

    def invoke(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", "run", "-i", str(rack), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "SPARKRACK_SANDBOX": "1",
                                   "SPARKRACK_LOCK_DIR": str(head_log)})

    done = invoke("--json", "--shell", BY_NODE)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["command"] == ["sh", "-c", BY_NODE]
    assert {n["node"]: (n["status"], n["exit_code"]) for n in data["nodes"]} == {
        "spark-01": ("ok", 0), "spark-02": ("failed", 3), "spark-03": ("ok", 0),
        "spark-04": ("unreachable", None)}
    assert [(g["label"], g["status"], g["stdout"]) for g in data["groups"]] == [
        ("spark-[01,03]", "ok", "same\n"), ("spark-02", "failed", "odd\n"),
        ("spark-04", "unreachable", "")], data["nodes"]  # stderr differs? it is shown
    assert "connection refused" in data["groups"][2]["errors"]["spark-04"]
    assert data["summary"] == "2 ok, 1 failed (spark-02), 1 unreachable (spark-04)"

    done = invoke("--limit", "spark-01,spark-03", "--", "echo", "a  b", "--", "c")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["-" * 16, "spark-[01,03] (2 nodes): exit 0", "-" * 16,
                                        "a  b -- c"], done.stdout + done.stderr
    assert done.stderr.strip() == "2 ok"

    done = invoke("--limit", "spark-01")
    assert done.returncode == 2 and "error: no command to run" in done.stderr
    logged = [json.loads(line) for line in (head_log / "audit.jsonl").read_text().splitlines()]
    assert [(r["task"], r["outcome"], r["exit_code"]) for r in logged] == [
        ("run", "failed", 1), ("run", "ok", 0)]  # read-only, but in the audit log all the same
    assert logged[1]["changed"]["nodes"] == ["spark-01", "spark-03"]


@needs_sshd
def test_run_task_shows_escape_sequences_escaped_unless_raw(sshd: Sshd, tmp_path: Path):
    """A node printing OSC 52 (set the operator's clipboard) and a screen clear."""
    rack = write_inventory(sshd, tmp_path / "inv", ("spark-01",))
    env = {**os.environ, "SPARKRACK_SANDBOX": "1", "SPARKRACK_LOCK_DIR": str(tmp_path / "head")}
    argv = [sys.executable, "-m", "invoke", "run", "-i", str(rack)]
    payload = ["--", "printf", "%b", "a\\033]52;c;aGk=\\007b\\033[2J\\tc\\n"]
    done = subprocess.run([*argv, *payload], cwd=REPO, capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == b"a\\x1b]52;c;aGk=\\x07b\\x1b[2J\tc"
    raw = subprocess.run([*argv, "--raw", *payload], cwd=REPO, capture_output=True, timeout=60,
                         env=env)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout.splitlines()[-1] == b"a\x1b]52;c;aGk=\x07b\x1b[2J\tc"
