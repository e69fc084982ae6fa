"""An exported engine pod's gate and secrets: its first init container is the gate, whose
exported command, run here as the kubelet would run it against a local API server, refuses
a node the agent has not verified in this boot and passes one it has; only that container
holds an API token; and HF_TOKEN is a file of a Secret volume, required when the inventory
says the model needs it, never an environment variable."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from invoke import Collection, Program
from kubefake import FakeApi
from test_capagent import BOOT_ID

from sparkrack.cli import export_tasks
from sparkrack.export import export_lws, manifest_yaml
from sparkrack.inventory import load_inventory
from sparkrack.remote import capnode

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = REPO / "inventory" / "rehearsal"


def pods(inventory, engine="sglang"):
    lane = export_lws(inventory, engine, "512k")
    lws = next(o for o in yaml.safe_load_all(manifest_yaml(lane.objects))
               if o["kind"] == "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]


@pytest.fixture(scope="module")
def rack_inventory():
    """The real rack's inventory (example addresses; nothing is contacted). Not named `rack`:
    that is the rehearsal rack's fixture, which would boot one for this module."""
    return load_inventory(REPO / "inventory" / "rack")


def test_every_engine_pod_starts_behind_its_gate_which_alone_holds_a_token(rack_inventory):
    for pod in pods(rack_inventory):
        gate = pod["initContainers"][0]
        assert gate["name"] == capnode.GATE_CONTAINER
        assert gate["command"] == ["python3", "/opt/sparkrack-scripts/capgate.py", "--node",
                                   "$(NODE_NAME)", "--wait", "600", "--fresh",
                                   str(capnode.FRESH_S)]
        assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (
            "sparkrack-gate", False)
        mount, scripts = gate["volumeMounts"]
        assert mount == {"name": "gate-account", "readOnly": True,
                         "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        assert scripts == {"name": "sparkrack-scripts", "readOnly": True,
                           "mountPath": "/opt/sparkrack-scripts"}
        volume = next(v for v in pod["volumes"] if v["name"] == "gate-account")
        assert [sorted(source) for source in volume["projected"]["sources"]] == [
            ["serviceAccountToken"], ["configMap"]]
        for container in pod["initContainers"][1:] + pod["containers"]:
            assert all(m["name"] != "gate-account" for m in container.get("volumeMounts", []))


def test_the_exported_gate_refuses_a_node_of_another_boot_and_passes_a_fresh_ok(rack_inventory,
                                                                               tmp_path):
    gate = pods(rack_inventory)[0]["initContainers"][0]
    scripts = next(o for o in export_lws(rack_inventory, "sglang", "512k").support
                   if o["metadata"]["name"] == "sparkrack-engine-scripts")
    mounted = tmp_path / "scripts"  # the ConfigMap as the kubelet mounts it
    mounted.mkdir()
    for name, text in scripts["data"].items():
        (mounted / name).write_text(text)
    (tmp_path / "token").write_text("the-gates-token\n")
    api = FakeApi()
    try:
        def run(boot: str):
            (tmp_path / "boot_id").write_text(boot + "\n")
            words = [w.replace("$(NODE_NAME)", "gb10-3").replace("$$", "$")
                     .replace("/opt/sparkrack-scripts", str(mounted))
                     for w in gate["command"]]  # the kubelet's expansion, the mount
            return subprocess.run(
                [sys.executable, *words[1:], "--wait", "0", "--api", api.url, "--account",
                 str(tmp_path), "--boot-id-file", str(tmp_path / "boot_id")],
                capture_output=True, text=True, timeout=60)

        api.edit("gb10-3", lambda n: n["metadata"].update(
            labels={capnode.LABEL: "true"},  # left by an agent killed before the reboot
            annotations={capnode.VERDICT: "ok: max 2150 MHz <= cap 2200 MHz",
                         capnode.CHECKED: capnode.stamp(time.time() - 60),
                         capnode.BOOT: "an-earlier-boot"}))
        done = run(BOOT_ID)
        assert done.returncode == 1
        assert done.stdout.splitlines()[-1].startswith("gb10-3: refused after 0 s: its "
                                                       "verdict (ok) belongs to boot "
                                                       "an-earlier-boot")
        api.edit("gb10-3", lambda n: n["metadata"]["annotations"].update(
            {capnode.BOOT: BOOT_ID}))
        done = run(BOOT_ID)
        assert done.returncode == 0, done.stdout + done.stderr
        assert api.patches == []  # the gate only reads
        assert all(request == ("GET", "/api/v1/nodes/gb10-3") for request in api.requests)
    finally:
        api.shutdown()


def required_inventory(tmp_path):
    own = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    with open(own / "group_vars" / "all.yml", "a") as out:
        out.write("\nhf_token_required: true\n")
    return load_inventory(own)


@pytest.mark.parametrize("required", [False, True])
def test_hf_token_is_a_file_of_the_secret_required_when_the_model_needs_it(rack_inventory,
                                                                         tmp_path, required):
    inventory = required_inventory(tmp_path) if required else rack_inventory
    for pod in pods(inventory, "vllm"):
        [volume] = [v for v in pod["volumes"] if v["name"] == "secrets"]
        assert volume["secret"] == {"secretName": "sparkrack-vllm", "defaultMode": 0o400,
                                    "items": [{"key": "HF_TOKEN", "path": "HF_TOKEN"}],
                                    "optional": not required}
        engine = pod["containers"][0]
        assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/sparkrack/HF_TOKEN"} in \
            engine["env"]
        assert all(e["name"] != "HF_TOKEN" and "secretKeyRef" not in e.get("valueFrom", {})
                   for c in pod["initContainers"] + [engine] for e in c.get("env", []))


def test_export_says_when_the_secret_is_required(tmp_path, capsys):
    inventory = required_inventory(tmp_path)
    try:
        Program(namespace=Collection.from_module(export_tasks)).run(
            ["invoke", "export", "--engine", "sglang", "-i", str(inventory.path),
             "--namespace", "llm"])
    except SystemExit as stop:
        assert stop.code == 0
    err = capsys.readouterr().err
    assert "secrets: HF_TOKEN from Secret sparkrack-sglang, required: the pods do not start " \
           "without it (hf_token_required), mounted as read-only files (not exported; " \
           "kubectl create secret generic --namespace llm sparkrack-sglang " \
           "--from-literal=HF_TOKEN=...)" in err
