"""`invoke facts.capture` on the rehearsal rack: every node's shape in one round trip, then
three faults of the field report's kind (a GID renumbered by firmware, a node recabled on
the other port, a kernel upgraded) each found by `--diff` as one line, the rest unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from simunits import mem_total_kb

from sparkrack.facts.roce import SPARK_HCAS
from sparkrack.rehearsal.cabling import Cabling
from sparkrack.rehearsal.twin.capture import capture

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]


def facts_capture(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "facts.capture", "-i",
                           "inventory/rehearsal", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_a_capture_records_the_rack_and_its_diff_finds_each_fault(engine_rack, rack, tmp_path):
    before = tmp_path / "rack.yml"
    done = facts_capture("--out", str(before))
    assert done.returncode == 0, done.stderr
    assert f"8 node(s) recorded in {before}" in done.stderr
    document = yaml.safe_load(before.read_text())
    assert [(n["name"], n["rank"]) for n in document["nodes"]] == [
        (n.name, n.rank) for n in engine_rack.nodes]
    for node in document["nodes"]:
        assert node["reachable"] and node["gpu"] == "NVIDIA GB10"
        assert node["driver"] == "580.126.09" and node["cuda"] == "13.0"
        assert node["memory_kib"] == mem_total_kb(node["name"]) and node["docker"]
        assert sorted(node["functions"]) == sorted(SPARK_HCAS)
        assert node["cabled"] == ["roceP2p1s0f0", "rocep1s0f0"]
        assert "3 v2 ipv4" in node["functions"]["rocep1s0f0"]["gids"]  # provisioned: addressed
        assert node["functions"]["rocep1s0f0"]["netdevs"]["enp1s0f0np0"]["mtu"] == 9000
        assert node["clock_cap_unit"]["active"] == "active"
    for secret in ("10.77.", "root", "ssh-ed25519", "BEGIN"):
        assert secret not in before.read_text()
    assert facts_capture("--diff", str(before)).returncode == 0  # nothing changed yet

    try:
        rack.renumber_gid("spark-03", 5)
        rack.cable("spark-05", Cabling(port=1))
        rack.kernel("spark-06", "6.17.0-1014-nvidia")
        done = facts_capture("--diff", str(before))
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert "spark-06: kernel 6.17.0-1008-nvidia -> 6.17.0-1014-nvidia" in lines
        assert "spark-05: cabled: -roceP2p1s0f0; -rocep1s0f0; +roceP2p1s0f1; +rocep1s0f1" in lines
        renumbered = [l for l in lines if l.startswith("spark-03: functions.rocep1s0f0.gids")]
        assert renumbered and "-3 v2 ipv4" in renumbered[0] and "+5 v2 ipv4" in renumbered[0]
        assert {l.split(":")[0] for l in lines} == {"spark-03", "spark-05", "spark-06"}
    finally:
        rack.renumber_gid("spark-03", None)
        rack.cable("spark-05", Cabling())
        rack.kernel("spark-06", None)
    again = capture(engine_rack)
    assert [n["kernel"] for n in again["nodes"]] == [n["kernel"] for n in document["nodes"]]
