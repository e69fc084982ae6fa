"""`invoke weights.*` and the weights gate on the rehearsal rack, with a stub model of its
own (~75 MB of generated shards beside the stub engine's config) at MODEL, which no
shipped profile uses; a test profile `weights-test` runs the stub engine from it. Every
task runs as a real `invoke` process. MODEL is removed from every node before and after,
and every cable is plugged back in."""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from provision_helpers import inventory_copy

from sparkrack.data import shipped
from sparkrack.deployments.record import read as read_records
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes
from sparkrack.lifecycle.lanes import Refused
from sparkrack.rehearsal.stub.modeldir import MANIFEST_NAME, model_files

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
MODEL = "/models/sparkrack-test-weights"
SHARDS = {f"model-{i:05d}-of-00006.safetensors": (12 << 20) + i * 4099 for i in range(1, 7)}
STALL_S = 10  # transfer_stall_timeout: a hop gives up a cut neighbour after this long
PROFILE = f"""
  weights-test:
    description: the 512k lane from the staged test checkpoint (tests/integration/test_weights.py)
    extends: 512k
    model_path: {MODEL}
"""


def wipe(inventory):
    with Fleet(inventory) as fleet:
        fleet.run(["rm", "-rf", MODEL], timeout=60).raise_for_failures()


@pytest.fixture(scope="module")
def weights(rack, inventory, tmp_path_factory):
    """(run(*argv) -> CompletedProcess, the test inventory, the local model directory)."""
    folder = tmp_path_factory.mktemp("weights")
    source = folder / "model"
    (source / "extra").mkdir(parents=True)
    for name, data in model_files().items():
        if name != MANIFEST_NAME:
            (source / name).write_bytes(data)
    generator = random.Random(16)
    for name, size in SHARDS.items():
        (source / ("extra" if name.startswith("model-00006") else "") / name).write_bytes(
            generator.randbytes(size))
    test_inventory = inventory_copy(inventory.path, folder / "inv", transfer_stall_timeout=STALL_S)
    (test_inventory.path / ".sparkrack" / "engines").mkdir(parents=True)
    (test_inventory.path / ".sparkrack" / "engines" / "sglang.yml").write_text(
        (shipped("engines") / "sglang.yml").read_text() + PROFILE)
    env = {**os.environ, "SPARKRACK_INVENTORY": str(test_inventory.path), "NO_COLOR": "1",
           "SPARKRACK_STATE_DIR": str(folder / "state")}
    env.pop("SPARKRACK_LOCK_DIR", None)

    def start(*argv: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "invoke", *argv], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
        process = start(*argv)
        out, err = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    wipe(inventory)
    yield run, start, test_inventory, source
    for node in inventory.nodes:
        rack.heal(node.name)
    lanes.down(inventory)
    wipe(inventory)


def records_on_head(inventory, put_back=None):
    """{kind: the head's deployment record file, or None}; with put_back, restore them."""
    head, folder = inventory.head.name, "/var/lib/sparkrack/deployments"
    with Fleet(inventory, [inventory.head]) as fleet:
        if put_back is None:
            return {kind: (r.stdout if r.ok else None) for kind in ("last-good", "failed")
                    for r in [fleet.run({head: ["cat", f"{folder}/{kind}.json"]})[head]]}
        for kind, text in put_back.items():
            if text is None:
                fleet.run({head: ["rm", "-f", f"{folder}/{kind}.json"]}).raise_for_failures()
            else:
                fleet.put({head: [(text.encode(), f"{folder}/{kind}.json", 0o644)]}
                          ).raise_for_failures()


def stage_json(run, *argv):
    done = run("weights.stage", "--model", MODEL, "--json", *argv)
    return done, json.loads(done.stdout)


def sha256sum_c(inventory, nodes=None):
    """{node: exit code of `sha256sum -c` of MODEL's manifest on it}."""
    with Fleet(inventory, inventory.select(nodes)) as fleet:
        results = fleet.run(["sh", "-c", f'cd "$0" && sha256sum -c --quiet {MANIFEST_NAME}',
                             MODEL], timeout=120)
    return {r.node: r.exit_code for r in results}


def test_stage_to_eight_nodes_then_a_rerun_skips_everything(weights, inventory):
    run, _, _, source = weights
    total = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    done, report = stage_json(run, "--source", str(source))
    assert done.returncode == 0, (report["nodes"], done.stderr)
    assert {n: s["state"] for n, s in report["nodes"].items()} == {
        n.name: "copied" for n in inventory.nodes}
    assert report["manifest_made"] and report["chains"] == 1 and report["files"] == 10
    # the source sent the model once (plus one header line per file), not eight times
    assert total <= report["bytes_sent"] < total + 10 * 200
    assert (source / MANIFEST_NAME).exists()  # made once, at the source
    assert set(sha256sum_c(inventory).values()) == {0}
    again, report = stage_json(run, "--source", str(source))
    assert again.returncode == 0, again.stderr
    assert {s["state"] for s in report["nodes"].values()} == {"present"}
    assert report["bytes_sent"] == 0 and not report["manifest_made"]
    assert all(s["hashed_bytes"] == 0 for s in report["nodes"].values())  # the hash cache


def test_a_truncated_file_is_found_refused_by_up_and_repaired_alone(weights, inventory,
                                                                    engine_rack):
    run, _, test_inventory, source = weights
    assert stage_json(run, "--source", str(source))[0].returncode == 0
    shard = "model-00003-of-00006.safetensors"
    with Fleet(inventory, inventory.select("spark-06")) as fleet:
        fleet.run(["truncate", "-s", "1000000", f"{MODEL}/{shard}"]).raise_for_failures()
    checked = run("weights.verify", "--model", MODEL, "--json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    rows = {r["node"]: r for r in json.loads(checked.stdout)["nodes"]}
    assert [n for n, r in rows.items() if r["problems"]] == ["spark-06"]
    assert rows["spark-06"]["problems"] == [f"{shard}: 1000000 bytes, the rack's {SHARDS[shard]}"]
    assert "1 of 8 node(s) not complete: spark-06" in checked.stderr
    with pytest.raises(Refused) as refused:
        lanes.up(test_inventory, "sglang", "weights-test")
    assert (f"weights: spark-06: {MODEL}: {shard}: 1000000 bytes, the rack's "
            f"{SHARDS[shard]} (run `invoke weights.stage --model {MODEL}`)") in str(refused.value)
    done = run("up", "--engine", "sglang", "--profile", "weights-test")
    assert done.returncode == 1 and "spark-06" in done.stderr and "weights" in done.stderr, \
        done.stdout + done.stderr
    # the re-stage sends that one file to that one node (from a node this time)
    repaired, report = stage_json(run, "--from", "spark-01")
    assert repaired.returncode == 0, repaired.stderr
    assert {n: s["copied"] for n, s in report["nodes"].items() if s["copied"]} == {
        "spark-06": [shard]}
    assert SHARDS[shard] <= report["bytes_sent"] < SHARDS[shard] + 200
    assert run("weights.verify", "--model", MODEL).returncode == 0
    # complete again: up starts the lane from it, the record keeps the manifest's digest
    digest = report["digest"]
    kept = records_on_head(inventory)
    deployment = lanes.up(test_inventory, "sglang", "weights-test")
    try:
        assert (deployment.model_path, deployment.weights_digest) == (MODEL, digest)
        with Fleet(test_inventory) as fleet:
            assert read_records(fleet, test_inventory)["current"].weights_digest == digest
        status = run("status")
        assert f"weights {MODEL} {digest[:12]}" in status.stdout
        busy = run("weights.remove", "--model", MODEL)
        assert busy.returncode == 2 and f"{MODEL} is in use" in busy.stderr, \
            busy.stdout + busy.stderr
        listed = run("weights.list", "--json")
        models = {m["path"]: m for m in json.loads(listed.stdout)["models"]}
        assert list(models[MODEL]["digests"]) == [digest]
        assert json.loads(listed.stdout)["used_by"][MODEL] == ["sglang weights-test"]
    finally:
        lanes.down(test_inventory)
        records_on_head(inventory, kept)  # last-good must not name a profile of this test
    checked = run("weights.remove", "--model", MODEL, "--check", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert set(sha256sum_c(inventory).values()) == {0}


def bytes_on(inventory, node):
    """Bytes of MODEL's files on node, partial files included."""
    with Fleet(inventory, inventory.select(node)) as fleet:
        result = fleet.run(["sh", "-c", 'find "$0" -type f -printf "%s\\n" 2>/dev/null | '
                            "awk '{s+=$1} END {print s+0}'", MODEL], timeout=5)[node]
    return int(result.stdout.strip() or 0) if result.ok else 0


def test_a_copy_cut_mid_way_resumes(weights, inventory, rack):
    run, start, _, source = weights
    wipe(inventory)
    first = start("weights.stage", "--model", MODEL, "--source", str(source), "--json",
                  "--bwlimit", "12")
    try:
        deadline = time.monotonic() + 60
        while bytes_on(inventory, "spark-05") < 20 << 20:
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.3)
        rack.cut("spark-05")
        cut = time.monotonic()
        out, err = first.communicate(timeout=240)
    finally:
        rack.heal("spark-05")
    report = json.loads(out)
    assert first.returncode == 1
    assert report["nodes"]["spark-05"]["state"] == "unreachable"
    assert "spark-05" in report["nodes"]["spark-05"]["error"]
    # the nodes after the cut got a second chain; the others finished the first
    assert report["chains"] == 2
    assert {n for n, s in report["nodes"].items() if s["state"] == "copied"} == {
        n.name for n in inventory.nodes} - {"spark-05"}, report["nodes"]
    assert time.monotonic() - cut < STALL_S + 40  # given up after the stall window
    assert bytes_on(inventory, "spark-05") >= 20 << 20  # what it received stays
    deadline = time.monotonic() + 120
    while True:  # the cut node's relay gives up its stalled stream, then the lock is free
        again, report = stage_json(run, "--source", str(source))
        if again.returncode == 0 or "still running" not in again.stdout or \
                time.monotonic() > deadline:
            break
        time.sleep(1)
    assert again.returncode == 0, again.stdout
    node = report["nodes"]["spark-05"]
    assert node["state"] == "copied" and node["resumed"]
    assert sum(node["resumed"].values()) > 0
    assert {s["state"] for n, s in report["nodes"].items() if n != "spark-05"} == {"present"}
    total = sum(p.stat().st_size for p in source.rglob("*") if p.is_file()
                and p.name != MANIFEST_NAME)
    assert report["bytes_sent"] < total  # only what spark-05 lacked
    assert set(sha256sum_c(inventory).values()) == {0}
