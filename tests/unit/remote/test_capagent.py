"""The Kubernetes node agent's script, run here as its pod runs it (the composed text of
remote/capagent.py, burn.sh beside it) against a fake nvidia-smi and a local API server
(kubefake.py): the label, taint and annotations it keeps for an ok, an uncapped and a
latched GPU, the clock it locks, what it leaves in place across its own restart within a
boot, a GPU that serves judged by the engine's own load and never burned, its liveness
probe, and its judge, which is `invoke burn`'s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubefake import FakeApi, engine_pod

from sparkrack.remote import capjudge, capnode, script, text

LABEL, TAINT = capnode.LABEL, capnode.TAINT
FAKE_SMI = r"""#!/bin/sh
# nvidia-smi for the agent: -lgc is logged; a query prints the GPU's reading (file gpu)
here=$(dirname "$0")
case "$1" in
  -lgc) echo "lgc $2" >> "$here/smi.log"; echo "GPU clocks set to \"(gpcclk $2)\""; exit 0 ;;
  --query-gpu=*) cat "$here/gpu"; exit 0 ;;
esac
exit 2
"""
BOOT_ID = Path(capnode.BOOT_ID_FILE).read_text().strip()  # this machine's: the node's here


@pytest.fixture
def pod(tmp_path):
    """The agent's files as the ConfigMap mounts them, a fake nvidia-smi on PATH, the
    service account's token, and the API server with the Node gb10-3."""
    agent_files(tmp_path)
    api = FakeApi()
    yield tmp_path, api
    api.shutdown()


def agent_files(folder: Path) -> Path:
    (folder / "capagent.py").write_text(script("capagent"))
    (folder / "burn.sh").write_text(text("burn"))
    (folder / "bin").mkdir()
    (folder / "bin" / "nvidia-smi").write_text(FAKE_SMI)
    (folder / "bin" / "nvidia-smi").chmod(0o755)
    (folder / "account").mkdir()
    (folder / "account" / "token").write_text("the-token\n")
    return folder


def agent_argv(pod_dir: Path, api: FakeApi, *options: str) -> list[str]:
    """The agent's argv as the DaemonSet gives it, against api; its load leaves a mark in
    pod_dir/loaded each time it runs."""
    return [sys.executable, str(pod_dir / "capagent.py"), "--node", "gb10-3", "--namespace",
            "sparkrack", "--cap", "2200", "--burn", str(pod_dir / "burn.sh"), "--api", api.url,
            "--account", str(pod_dir / "account"), "--alive-file", str(pod_dir / "alive"),
            "--watch", "1", *options, "--", "sh", "-c",
            f"echo ran >> {pod_dir / 'loaded'}; sleep 1.6"]


def agent_env(pod_dir: Path, reading: str) -> dict:
    (pod_dir / "bin" / "gpu").write_text(reading + "\n")
    return {**os.environ, "PATH": f"{pod_dir / 'bin'}:{os.environ['PATH']}"}


def run_agent(pod_dir: Path, api: FakeApi, reading: str, *options: str):
    return subprocess.run(agent_argv(pod_dir, api, "--once", *options), capture_output=True,
                          text=True, timeout=120, env=agent_env(pod_dir, reading))


def burned(pod_dir: Path) -> int:
    """How many times the agent's own load ran on the GPU."""
    marks = pod_dir / "loaded"
    return len(marks.read_text().splitlines()) if marks.exists() else 0


@pytest.mark.parametrize("reading, verdict, label", [
    ("2150, 92.5, 100", "ok", "true"),
    ("2460, 118.0, 100", "UNCAPPED", None),
    ("720, 21.0, 100", "LATCHED", None),
    ("2100, 8.0, 3", "NO LOAD", None),  # the GPU never got busy: nothing proven
])
def test_the_label_and_taint_follow_the_verdict(pod, reading, verdict, label):
    pod_dir, api = pod
    done = run_agent(pod_dir, api, reading)
    assert done.returncode == (0 if verdict == "ok" else 1), done.stdout + done.stderr
    first, last = api.patches[0], api.patches[-1]
    assert first[2]["metadata"]["labels"] == {LABEL: None}  # off first: nothing verified
    assert first[2]["spec"]["taints"] == [
        {"key": TAINT, "value": "unverified", "effect": "NoExecute"}]
    assert last[0] == "/api/v1/nodes/gb10-3"
    assert last[1]["Authorization"] == "Bearer the-token"
    assert last[1]["Content-Type"] == "application/merge-patch+json"
    assert api.labels().get(LABEL) == label
    assert api.taints() == ([] if label else [
        {"key": TAINT, "value": verdict.lower().replace(" ", "-"), "effect": "NoExecute"}])
    annotations = api.annotations()
    assert annotations[capnode.VERDICT].startswith(f"{verdict}: ")
    assert annotations[capnode.BOOT] == BOOT_ID
    assert abs(capnode.epoch_of(annotations[capnode.CHECKED]) - time.time()) < 120
    assert (pod_dir / "bin" / "smi.log").read_text() == "lgc 0,2200\n"  # as the unit does
    assert burned(pod_dir) >= 1
    assert f"gb10-3: {verdict}: " in done.stdout
    assert f"label {LABEL} {'set' if label else 'removed'}" in done.stdout
    assert ("delete this node's agent pod" in done.stdout) == (verdict == "UNCAPPED")


def test_an_api_server_out_of_reach_is_said_and_the_verdict_stands(pod):
    pod_dir, api = pod
    api.shutdown()
    api.server_close()
    done = run_agent(pod_dir, api, "2150, 92.5, 100")
    assert done.returncode == 0
    assert "the label could not be set" in done.stdout


def test_a_refusal_is_said_in_the_api_servers_words(pod):
    pod_dir, api = pod
    api.deny = ("nodes \"gb10-3\" is forbidden: ValidatingAdmissionPolicy "
                "'sparkrack-node-agent.sparkrack' denied request: the node agent may change "
                "only the Node its pod runs on")
    done = run_agent(pod_dir, api, "2150, 92.5, 100")
    assert "the label could not be set: HTTP Error 403: Forbidden: nodes \"gb10-3\" is " \
           "forbidden: ValidatingAdmissionPolicy" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_an_ok_of_this_boot_outlives_the_agent_and_nothing_else_does(pod):
    """A DaemonSet rollout or a killed agent within a boot evicts nothing; after a reboot the
    old ok means nothing (the clock lock is gone) and the node is tainted at once."""
    pod_dir, api = pod
    assert run_agent(pod_dir, api, "2150, 92.5, 100").returncode == 0
    before = len(api.patches)
    api.pods["sparkrack"] = [engine_pod()]  # an engine serves, idle
    done = run_agent(pod_dir, api, "2100, 8.0, 3")
    assert "resuming: ok at" in done.stdout
    assert [p[2] for p in api.patches[before:]] == [{"metadata": {"labels": {LABEL: "true"}}}]
    assert api.taints() == []  # the engine stays
    api.edit("gb10-3", lambda n: n["metadata"]["annotations"].update(
        {capnode.BOOT: "an-earlier-boot"}))
    done = run_agent(pod_dir, api, "2100, 8.0, 3")
    assert "UNVERIFIED: the agent starts" in done.stdout
    assert api.taints() == [{"key": TAINT, "value": "unverified", "effect": "NoExecute"}]
    assert LABEL not in api.labels()


def test_a_gpu_that_serves_is_judged_by_the_engines_load_and_never_burned(pod):
    pod_dir, api = pod
    api.pods["sparkrack"] = [engine_pod()]
    done = run_agent(pod_dir, api, "2150, 92.5, 100")  # the engine works: its own load
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the engine's own load: nothing was burned" in done.stdout
    assert api.labels()[LABEL] == "true" and burned(pod_dir) == 0
    done = run_agent(pod_dir, api, "2100, 8.0, 3")  # idle: nothing to judge, nothing burned
    assert "the engine here is idle" in done.stdout and burned(pod_dir) == 0
    assert api.labels()[LABEL] == "true" and api.taints() == []
    assert api.annotations()[capnode.VERDICT].startswith("ok: ")
    done = run_agent(pod_dir, api, "2460, 118.0, 100")  # uncapped under its load: evicted
    assert "UNCAPPED" in done.stdout and burned(pod_dir) == 0
    assert api.taints()[0]["value"] == "uncapped"
    api.pods["sparkrack"] = []  # the engine is gone: the GPU is burned again
    run_agent(pod_dir, api, "2150, 92.5, 100")
    assert burned(pod_dir) >= 1 and api.taints() == []


def test_pods_it_cannot_read_may_serve_and_are_not_burned(pod):
    pod_dir, api = pod
    api.pods = None  # RBAC refuses the list
    done = run_agent(pod_dir, api, "2100, 8.0, 3")
    assert "the engine pods of gb10-3 could not be read: HTTP Error 403" in done.stdout
    assert "its engine pods could not be read, so the GPU is not burned; the last verdict " \
           "stands" in done.stdout
    assert burned(pod_dir) == 0 and done.returncode == 1


def test_a_taint_of_another_keeps_its_place_and_a_race_is_retried(pod):
    pod_dir, api = pod
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    api.edit("gb10-3", lambda n: n.setdefault("spec", {}).update(taints=[other]))
    api.races = 2  # the node controller changes the Node between the agent's read and write
    run_agent(pod_dir, api, "2460, 118.0, 100")
    assert api.taints() == [other, {"key": TAINT, "value": "uncapped", "effect": "NoExecute"}]
    assert all(p[2]["metadata"]["resourceVersion"] for p in api.patches if "spec" in p[2])
    assert api.races == 0
    run_agent(pod_dir, api, "2150, 92.5, 100")
    assert api.taints() == [other]


def test_a_pod_at_its_gate_gets_a_check_at_once(pod):
    """While an engine serves idle, no verdict is made and the last ok grows old; when the
    group is recreated, its new pod waits at the gate, and the agent (which checks every
    600 s) looks each tick and judges the free GPU at once."""
    pod_dir, api = pod
    assert run_agent(pod_dir, api, "2150, 92.5, 100").returncode == 0
    api.edit("gb10-3", lambda n: n["metadata"]["annotations"].update(
        {capnode.CHECKED: capnode.stamp(time.time() - 2000)}))
    api.pods["sparkrack"] = [engine_pod()]
    marks, looks = burned(pod_dir), pod_lists(api)
    agent = subprocess.Popen(agent_argv(pod_dir, api, "--every", "3600", "--tick", "0.2"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=agent_env(pod_dir, "2100, 8.0, 3"))
    try:
        wait_for(lambda: pod_lists(api) >= looks + 2)  # its first check is over: idle
        assert burned(pod_dir) == marks
        (pod_dir / "bin" / "gpu").write_text("2150, 92.5, 100\n")
        api.pods["sparkrack"] = [engine_pod(phase="gate")]
        wait_for(lambda: capnode.refusal(api.node(), BOOT_ID, time.time()) == "")
    finally:
        agent.terminate()
        out = agent.communicate(timeout=60)[0]
    assert agent.returncode == 0, out
    assert burned(pod_dir) > marks, out
    assert "the engine here is idle" in out and "resuming: ok at" in out
    assert "the agent ends: label" in out and LABEL not in api.labels()  # SIGTERM: label off
    assert api.annotations()[capnode.VERDICT].startswith("ok: ")  # the verdict stands


def pod_lists(api: FakeApi) -> int:
    return sum(1 for method, path in api.requests if method == "GET" and "/pods?" in path)


def wait_for(condition, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_liveness_probe_reads_the_agents_heartbeat(tmp_path):
    agent = tmp_path / "capagent.py"
    agent.write_text(script("capagent"))
    beat = tmp_path / "alive"
    probe = [sys.executable, str(agent), "alive", str(beat), "420"]
    done = subprocess.run(probe, capture_output=True, text=True)
    assert done.returncode == 1 and "no sign of life" in done.stdout
    beat.write_text("")
    assert subprocess.run(probe).returncode == 0
    old = time.time() - 1000
    os.utime(beat, (old, old))
    done = subprocess.run(probe, capture_output=True, text=True)
    assert done.returncode == 1 and "more than 420 s: it is stuck" in done.stdout


@pytest.mark.parametrize("readings, verdict", [
    ([(2150, 92.5, 100), (2190, 95.0, 100)], capjudge.OK),
    ([(2150, 92.5, 100), (2410, 110.0, 100)], capjudge.UNCAPPED),
    ([(640, 20.0, 100), (700, 22.0, 100)], capjudge.LATCHED),
    ([(2150, 5.0, 2)], capjudge.NO_LOAD),
])
def test_the_agents_judge_is_invoke_burns(readings, verdict):
    """The composed script's judge and safety/burn.py's are one function's text."""
    from sparkrack.safety import burn

    space: dict = {}
    exec(compile(script("capagent").replace('if __name__ == "__main__":', "if False:"),
                 "capagent", "exec"), space)
    samples = [capjudge.Sample(float(i), *r) for i, r in enumerate(readings)]
    mine = space["judge"]([space["Sample"](float(i), *r) for i, r in enumerate(readings)],
                          2200)
    assert mine == burn.judge(samples, 2200) and mine[0] == verdict
