"""Two operators at once, as real `invoke` processes against a loopback "head" (loopback.py):
exactly one takes the rack lock, the other is refused in one line with exit code 3 naming
the holder, and the audit log has a record of each. The lock and the log live in a temp
folder (SPARKRACK_LOCK_DIR), never in this machine's /var/lib/sparkrack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import Sshd, needs_sshd

from sparkrack.oplock import audit

pytestmark = needs_sshd

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def operators(sshd: Sshd, tmp_path: Path):
    """A one-node loopback inventory on disk, and a way to run invoke against it."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(f"""all:
  children:
    sparks:
      hosts:
        spark-01: {{ansible_host: 127.0.0.1, ansible_port: {sshd.port}, rank: 0}}
      vars:
        ansible_user: root
        ansible_ssh_private_key_file: {sshd.client_key}
""")
    (inventory / "group_vars" / "all.yml").write_text(f"""rack_name: loopback
tp_size: 1
ssh_connect_timeout: 2
known_hosts_file: {sshd.known_hosts}
""")
    env = {**os.environ, "SPARKRACK_SANDBOX": "1", "SPARKRACK_LOCK_DIR": str(tmp_path / "head"),
           "SPARKRACK_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}

    def start(*argv: str) -> subprocess.Popen:
        at = argv.index("--") if "--" in argv else len(argv)  # `run -- CMD`: -i before `--`
        argv = (*argv[:at], "-i", str(inventory), *argv[at:])
        return subprocess.Popen([sys.executable, "-m", "invoke", *argv],
                                cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(*argv: str) -> subprocess.CompletedProcess:
        process = start(*argv)
        out, err = process.communicate(timeout=60)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    return start, run, tmp_path


def test_two_ups_at_once_one_takes_the_lock_the_other_is_refused(operators):
    start, run, where = operators
    first, second = start("up", "--engine", "sglang"), start("up", "--engine", "vllm")
    done = [(p, *p.communicate(timeout=60)) for p in (first, second)]
    codes = sorted(p.returncode for p, _, _ in done)
    refused = [(p, err) for p, _, err in done if p.returncode == 3]
    assert len(refused) == 1, [(p.returncode, err) for p, _, err in done]
    assert codes[0] != 3  # the other ran (its gates refuse: no GPU, no env files here)
    lines = refused[0][1].strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: the rack lock is held by ")
    assert "running `up --engine " in lines[0] and "since " in lines[0]
    entries = audit.merge(audit.parse_lines((where / "head" / "audit.jsonl").read_text()))
    assert sorted(e["command"] for e in entries) == ["up --engine sglang --profile 512k",
                                                     "up --engine vllm --profile 512k"]
    assert all(e["outcome"] == "refused" and e["complete"] for e in entries)
    assert any("rack lock is held by" in e["error"] for e in entries)
    assert any("rack lock is held by" not in e["error"] for e in entries)  # the gates' refusal
    local = audit.parse_lines((where / "state" / "audit.jsonl").read_text())
    assert {r["id"] for r in local} == {e["id"] for e in entries}

    shown = run("lock")
    assert (shown.returncode, shown.stdout.strip()) == (
        0, "the rack lock on spark-01 is free")
    log = run("log", "--json")
    assert [e["id"] for e in json.loads(log.stdout)] == [e["id"] for e in entries]
    table = run("log", "--task", "up")
    assert table.returncode == 0 and "up --engine vllm" in table.stdout


def test_unlock_force_breaks_and_logs(operators):
    start, run, where = operators
    head = where / "head"
    head.mkdir()
    (head / "lock.json").write_text(json.dumps({
        "since": 1, "token": "ab" * 16, "operator": "bob@ci", "pid": 99, "task": "roll",
        "command": "roll --engine vllm"}, separators=(",", ":")) + "\n")
    held = run("lock")
    assert held.returncode == 3
    assert held.stdout.startswith("the rack lock on spark-01 is held by bob@ci (pid 99) running "
                                  "`roll --engine vllm`")
    refused = run("provision", "--role", "clock_cap")
    assert refused.returncode == 3 and "held by bob@ci (pid 99)" in refused.stderr
    assert run("unlock").returncode == 2
    broken = run("unlock", "--force", "bob's laptop died")
    assert broken.returncode == 0 and "broke the rack lock of bob@ci" in broken.stdout
    assert run("lock").returncode == 0
    entries = audit.merge(audit.parse_lines((head / "audit.jsonl").read_text()))
    assert [(e["task"], e["outcome"]) for e in entries] == [("provision", "refused"),
                                                             ("unlock", "ok")]
    assert entries[1]["overrides"] == ["unlock --force: bob's laptop died"]
    assert entries[1]["changed"]["lock"]["operator"] == "bob@ci"


def test_run_is_refused_while_another_operator_holds_the_lock_unless_forced(operators):
    """Issue 23 item 5: `invoke run` names the holder and exits 3; --force runs and the
    override is in the audit log."""
    start, run, where = operators
    head = where / "head"
    head.mkdir()
    (head / "lock.json").write_text(json.dumps({
        "since": 1, "token": "ab" * 16, "operator": "bob@ci", "pid": 99, "task": "down",
        "command": "down"}, separators=(",", ":")) + "\n")
    marker = where / "ran"
    refused = run("run", "--", "touch", str(marker))
    assert refused.returncode == 3, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: the rack lock is held by bob@ci (pid 99) running `down`")
    assert line.endswith("(wait until `invoke lock` shows it free, or run anyway with --force, "
                         "which the audit log records)")
    assert not marker.exists()
    forced = run("run", "--force", "--", "touch", str(marker))
    assert forced.returncode == 0, forced.stderr
    assert marker.exists() and "running anyway (--force, recorded)" in forced.stderr
    entries = audit.merge(audit.parse_lines((head / "audit.jsonl").read_text()))
    assert [(e["task"], e["outcome"]) for e in entries] == [("run", "refused"), ("run", "ok")]
    assert "held by bob@ci" in entries[0]["error"] and entries[0]["exit_code"] == 3
    assert entries[1]["overrides"][0].startswith("run --force: the rack lock was held by bob@ci")
    assert entries[1]["command"].startswith("run --argv 'touch ") and "--force" in entries[1]["command"]
    (head / "lock.json").unlink()
    marker.unlink()
    assert run("run", "--", "touch", str(marker)).returncode == 0 and marker.exists()
