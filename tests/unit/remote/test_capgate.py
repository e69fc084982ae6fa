"""An exported engine pod's gate (remote/capgate.py, composed as its init container runs it)
against a local API server (kubefake.py) and the node agent run here as its pod runs it: the
agent killed with SIGKILL leaves its label, and the gate still refuses a node whose ok
belongs to another boot or has grown old; it waits for a fresh ok of this boot and passes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubefake import FakeApi
from test_capagent import BOOT_ID, agent_argv, agent_env, agent_files, wait_for

from sparkrack.remote import capnode, script


@pytest.fixture
def node(tmp_path):
    """The agent's pod folder, the gate's script and a boot id file, the API server."""
    agent_files(tmp_path)
    (tmp_path / "capgate.py").write_text(script("capgate"))
    api = FakeApi()
    yield tmp_path, api
    api.shutdown()


def gate(folder: Path, api: FakeApi, *, boot: str = BOOT_ID, wait: str = "0",
         **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    """The gate as the init container runs it (`python3 -c SCRIPT ...`), on a node whose
    boot id is boot."""
    (folder / "boot_id").write_text(boot + "\n")
    argv = [sys.executable, "-c", (folder / "capgate.py").read_text(), "--node", "gb10-3",
            "--wait", wait, "--api", api.url, "--account", str(folder / "account"),
            "--boot-id-file", str(folder / "boot_id")]
    if popen:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def refused(done: subprocess.CompletedProcess, why: str) -> bool:
    lines = done.stdout.strip().splitlines()
    return done.returncode == 1 and lines[-1].startswith("gb10-3: refused after") and \
        why in lines[-1] and "Traceback" not in done.stdout + done.stderr


def test_an_agent_killed_with_sigkill_leaves_its_label_and_the_gate_refuses(node):
    folder, api = node
    agent = subprocess.Popen(agent_argv(folder, api, "--every", "3600", "--tick", "0.2"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=agent_env(folder, "2150, 92.5, 100"))
    try:
        wait_for(lambda: api.labels().get(capnode.LABEL) == "true")
    finally:
        agent.send_signal(signal.SIGKILL)  # no SIGTERM handler runs: nothing is cleaned up
        agent.communicate(timeout=60)
    assert agent.returncode == -signal.SIGKILL
    assert api.labels()[capnode.LABEL] == "true" and api.taints() == []  # as it was
    assert gate(folder, api).returncode == 0  # the same boot, a fresh ok: the lock holds
    rebooted = gate(folder, api, boot="0c2613e1-a2eb-4c8c-8455-c81c3f34ce67")
    assert refused(rebooted, "belongs to boot " + BOOT_ID + " and the node runs boot "
                   "0c2613e1-a2eb-4c8c-8455-c81c3f34ce67: the clock lock did not survive")
    api.edit("gb10-3", lambda n: n["metadata"]["annotations"].update(
        {capnode.CHECKED: capnode.stamp(time.time() - 2000)}))  # 33 min on, no agent
    assert refused(gate(folder, api), "not within the last 900 s: no agent has judged it since")


@pytest.mark.parametrize("annotations, says", [
    ({}, "no clock-cap verdict on this node"),
    ({capnode.VERDICT: "UNCAPPED: SM clock reached 2460 MHz", capnode.BOOT: BOOT_ID},
     "its last verdict is UNCAPPED: SM clock reached 2460 MHz"),
    ({capnode.VERDICT: "ok: max 2150 MHz", capnode.BOOT: BOOT_ID,
      capnode.CHECKED: capnode.stamp(time.time() + 3600)}, "not within the last 900 s"),  # ahead
])
def test_the_gate_refuses_what_is_not_a_fresh_ok_of_this_boot(node, annotations, says):
    folder, api = node
    api.edit("gb10-3", lambda n: n["metadata"].update(annotations=dict(annotations),
                                                      labels={capnode.LABEL: "true"}))
    assert refused(gate(folder, api), says)


def test_the_gate_waits_for_the_agent_and_passes(node):
    folder, api = node
    waiting = gate(folder, api, wait="60", popen=True)
    try:
        wait_for(lambda: any(path.endswith("/nodes/gb10-3") for _, path in api.requests))
        done = subprocess.run(agent_argv(folder, api, "--once"), capture_output=True, text=True,
                              timeout=120, env=agent_env(folder, "2150, 92.5, 100"))
        assert done.returncode == 0, done.stdout + done.stderr
        out = waiting.communicate(timeout=60)[0]
    finally:
        waiting.kill()
    lines = out.strip().splitlines()
    assert waiting.returncode == 0, out
    assert lines[0].startswith("gb10-3: waiting for a fresh ok of this boot (0 s of 60 s")
    assert lines[-1] == f"gb10-3: clock cap verified ok in this boot ({BOOT_ID}): the engine " \
                        "may start"


def test_an_api_server_out_of_reach_is_no_ok(node):
    folder, api = node
    api.shutdown()
    api.server_close()
    assert refused(gate(folder, api), "its Node could not be read")
