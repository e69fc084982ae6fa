"""`invoke status` / `invoke facts` on the rehearsal rack, through the real CLI."""

import json
import os
import subprocess
import sys
import time

import pytest
from simunits import mem_total_kb

from sparkrack.facts.node import GPU_FIELDS
from sparkrack.fleet import Fleet
from sparkrack.status.rows import gather_status

pytestmark = pytest.mark.rack
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def invoke(*args, timeout=60):
    """Run the invoke CLI from the repo as an operator would; returns CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "SPARKRACK_SANDBOX": "1"},
                          stdin=subprocess.DEVNULL)


def test_status_json_has_eight_rows_with_the_simulated_gpu(rack):
    done = invoke("status", "-i", "inventory/rehearsal", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["nodes"]
    assert [r["node"] for r in rows] == [f"spark-0{i}" for i in range(1, 9)]
    assert [r["rank"] for r in rows] == list(range(8))
    for row in rows:
        assert row["reachable"] == "ok"
        assert row["facts"]["gpu"]["name"] == "NVIDIA GB10"
        assert row["facts"]["gpu"]["max_sm_mhz"] == 3003
        assert row["facts"]["mem_total_kb"] == mem_total_kb(row["node"])  # the unit's own
        assert row["facts"]["hostname"] == row["node"]
        assert row["ports"] == {"rocep1s0f0": "4: ACTIVE", "roceP2p1s0f0": "4: ACTIVE"}  # nccl_ib_hca


def test_status_table_plain_when_not_a_tty(rack):
    done = invoke("status", "-i", "inventory/rehearsal")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["rank", "node", "reach"]
    assert all("NVIDIA GB10" in line for line in lines[1:9])


def test_cut_node_shows_unreachable_within_seconds_and_exit_1(rack):
    rack.cut("spark-05")
    try:
        started = time.monotonic()
        done = invoke("status", "-i", "inventory/rehearsal", "--json")
        elapsed = time.monotonic() - started
    finally:
        rack.heal("spark-05")
    assert elapsed < 6  # the TCP probe names a cut node in 1.5 s; the rest is start-up
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {r["node"]: r for r in json.loads(done.stdout)["nodes"]}
    assert rows["spark-05"]["reachable"] == "unreachable"
    assert sum(r["reachable"] == "ok" for r in rows.values()) == 7, done.stdout + done.stderr
    assert "spark-05" in done.stderr and "Traceback" not in done.stderr


def test_warm_connection_to_a_cut_node_fails_fast(rack, inventory):
    with Fleet(inventory) as fleet:
        assert fleet.run(["true"]).all_ok  # connections are now open and cached
        rack.cut("spark-02")
        try:
            started = time.monotonic()
            result = fleet.run(["true"])
            elapsed = time.monotonic() - started
        finally:
            rack.heal("spark-02")
    assert result["spark-02"].status == "unreachable"
    assert sum(r.status == "ok" for r in result) == 7
    assert elapsed < 10


def test_nvidia_smi_answers_the_status_query_in_real_csv(inventory):
    with Fleet(inventory, inventory.select("spark-01")) as fleet:
        with_header = fleet.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}",
                                 "--format=csv"])["spark-01"]
    header, values = with_header.stdout.splitlines()
    assert header == ("name, clocks.current.sm [MHz], clocks.max.sm [MHz], power.draw [W], "
                      "temperature.gpu, utilization.gpu [%], pstate, persistence_mode, "
                      "driver_version, compute_cap")
    assert values.startswith("NVIDIA GB10, ") and " MHz, 3003 MHz, " in values
    assert values.endswith(", 12.1")


def test_status_of_a_limit(inventory):
    rows = gather_status(inventory, "spark-03,spark-08")
    assert [r.node for r in rows] == ["spark-03", "spark-08"]


def test_bad_inventory_is_one_line_exit_2(tmp_path):
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n"
                                        "        spark-01: {ansible_host: 127.0.0.1, rank: one}\n")
    done = invoke("status", "-i", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().startswith(f"error: {tmp_path}/hosts.yml:5:")


def test_real_rack_example_addresses_are_refused(tmp_path):
    done = invoke("status", "-i", "inventory/rack")
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr and "192.0.2.11" in done.stderr
