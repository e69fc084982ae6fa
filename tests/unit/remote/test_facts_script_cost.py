"""The facts script's cost on a node (docs/internals.md#the-facts-scripts-cost): a round
trip of the watch's poll imports none of the modules that made most of its CPU (subprocess,
json and its re, hashlib, socket, base64, shlex); spawn.run gives what subprocess.run gave
(exit code, output, stderr merged or dropped, -N for a signal, OSError for an argv that
cannot run, a timeout that kills); the arguments parse as json.loads parses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkrack.remote import gather, script
from sparkrack.remote.spawn import run

HEAVY = {"subprocess", "json", "re", "hashlib", "socket", "base64", "shlex", "threading",
         "selectors", "signal"}


def imported_by(*args: str, env: dict | None = None) -> set[str]:
    """The modules the facts script imports answering args (as the nodes run it)."""
    done = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c",
                           script("gather"), *args], capture_output=True, text=True,
                          timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("@@base\n")
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line} - {"module"}


@pytest.mark.parametrize("args", [
    ("sample_section", json.dumps(["clocks.sm,power.draw", "clocks.max.sm"])),
    ("file_section", json.dumps(["/etc/hostname", 65536]), "unit_section",
     json.dumps(["ssh.service", "ActiveState", "true"])),
    ("net_section", "[]", "memory_section", "[]", "hca_section", json.dumps(["rocep1s0f0"])),
])  # node_section is left out: reading os-release as the shell does takes shlex (and re)
def test_a_round_trip_imports_none_of_the_heavy_modules(args, tmp_path):
    # a PATH where nvidia-smi answers as a node's does, cheaply
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '2100, 12.5'\n")
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    heavy = imported_by(*args, env=env) & HEAVY
    assert heavy == set(), f"the facts script imported {sorted(heavy)} for {args[0]}"


def test_the_guard_sees_a_heavy_import():
    done = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c",
                           "import subprocess\n" + script("gather"), "memory_section", "[]"],
                          capture_output=True, text=True, timeout=30)
    assert " subprocess\n" in done.stderr


def test_run_gives_the_exit_code_and_the_output_with_stderr_merged_or_dropped():
    both = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    assert run(both) == (3, b"out\nerr\n")
    assert run(both, stderr=False) == (3, b"out\n")
    assert run(["sh", "-c", "cat"]) == (0, b"")  # stdin is /dev/null: no wait


def test_run_is_subprocess_run_for_a_signal_and_a_missing_command():
    argv = ["sh", "-c", "kill -TERM $$"]
    assert run(argv)[0] == subprocess.run(argv).returncode == -15
    with pytest.raises(FileNotFoundError):
        run(["no-such-command-sparkrack"])
    # SIGPIPE and SIGXFSZ back to their defaults, as subprocess leaves them (Python
    # ignores both; a command would die quietly on EPIPE instead of by the signal)
    ignored = ["sh", "-c", "grep SigIgn /proc/$$/status"]
    masks = [int(out.split()[1], 16) & (1 << 12 | 1 << 24)  # signals 13 and 25
             for out in (run(ignored)[1], subprocess.run(ignored, capture_output=True).stdout)]
    assert masks == [0, 0]


def test_run_kills_a_command_past_its_timeout_and_leaves_no_child():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still running after 0.3 s"):
        run(["sleep", "30"], timeout=0.3)
    assert time.monotonic() - started < 5
    assert children_named("sleep") == []  # killed and reaped: not even a zombie is left


def children_named(comm: str) -> list[int]:
    """The pids of this process's children called comm (zombies included)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, _, rest = stat_file.read_text().partition(") ")
        except OSError:
            continue
        if name.split(" (", 1)[1] == comm and int(rest.split()[1]) == os.getpid():
            found.append(int(stat_file.parent.name))
    return found


@pytest.mark.parametrize("value", [["/etc/x", 65536], [["a", 1.5], {"k": None, "t": True}],
                                   ["é\n\u2028", -3, 1e300], []])
def test_the_arguments_parse_as_json_loads_parses_them(value):
    text = json.dumps(value)
    assert gather.json_value(text) == json.loads(text) == value


@pytest.mark.parametrize("text", ["NaN", "[1,", "[1] x", "", "[Infinity]"])
def test_text_that_is_not_json_is_refused(text):
    with pytest.raises(ValueError):
        gather.json_value(text)
