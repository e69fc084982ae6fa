"""`invoke rehearsal.up --twin` on this machine: a capture of the rehearsal rack after two
field faults (spark-03's RoCE v2 IPv4 GID at 6 and spark-04's at 5, as real units put them
after reboots, spark-06 on another kernel),
taken down to three of its nodes (one with an MTU left set on its uncabled port), becomes
a rack of those three with that shape; `up`
there is refused until `provision` has run, provisioning probes each node's GID where its
table put it, a capture of the twin is the capture it was built from, and a plain
`rehearsal.up` gives the standard rack back."""

from __future__ import annotations

from pathlib import Path

import pytest
from rackhealth import LOAD_STARTUP_S
from stubgroup import nothing_runs

from sparkrack.core.errors import SparkrackError
from sparkrack.engineenv import parse_env
from sparkrack.fleet import Fleet
from sparkrack.fleet.netguard import blackhole_present
from sparkrack.lifecycle import lanes
from sparkrack.provision import provision
from sparkrack.rehearsal.stub.modeldir import write_stub_model
from sparkrack.rehearsal.twin.build import build_twin
from sparkrack.rehearsal.twin.capture import capture
from sparkrack.rehearsal.twin.diff import differences

pytestmark = pytest.mark.rack
REHEARSAL_INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "rehearsal"
TWIN_NODES = ("spark-03", "spark-04", "spark-06")


def three_of(document: dict) -> dict:
    """The capture taken down to TWIN_NODES, ranked 0..2 (a rack of three)."""
    nodes = [dict(n) for n in document["nodes"] if n["name"] in TWIN_NODES]
    for rank, node in enumerate(nodes):
        node["rank"] = rank
    return {**document, "rack": {**document["rack"], "tp_size": len(nodes)}, "nodes": nodes}


def test_a_twin_has_the_captures_shape_and_the_standard_rack_comes_back(engine_rack, rack,
                                                                        tmp_path):
    twin_rack = None
    try:
        rack.renumber_gid("spark-03", 6)
        rack.renumber_gid("spark-04", 5)
        rack.kernel("spark-06", "6.17.0-1014-nvidia")
        rack.netdev_mtu("spark-04", "enp1s0f1np1", 9000)  # left set on an uncabled port
        assert provision(engine_rack).exit_code == 0
        original = three_of(capture(engine_rack))
        assert original["nodes"][1]["functions"]["rocep1s0f1"]["netdevs"] == {
            "enp1s0f1np1": {"mtu": 9000, "state": "down"}}
        rack.down()
        # the rack is down, its guard route stays: a stray packet for it never leaves here
        assert blackhole_present(Path("/proc/net/route").read_text())
        twin_rack = build_twin(original, REHEARSAL_INVENTORY, tmp_path / "twin",
                               say=lambda line: None)
        twin = twin_rack.inventory
        assert [(n.name, n.rank, n.address) for n in twin.nodes] == [
            ("spark-03", 0, "10.77.1.11"), ("spark-04", 1, "10.77.1.12"),
            ("spark-06", 2, "10.77.1.13")]
        assert twin.vars.tp_size == 3
        for name in TWIN_NODES:
            twin_rack.load_startup(name, LOAD_STARTUP_S)

        with pytest.raises(SparkrackError) as refused:  # a fresh twin: nothing provisioned
            lanes.up(twin, "sglang", "512k")
        assert "provision" in refused.value.line()

        assert provision(twin).exit_code == 0
        with Fleet(twin) as fleet:
            files = fleet.run(["cat", "/etc/sparkrack/nccl.env"])
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50})
        gid = {r.node: parse_env(r.stdout)["NCCL_IB_GID_INDEX"] for r in files}
        assert gid == {"spark-03": "6", "spark-04": "5", "spark-06": "3"}
        assert differences(original, capture(twin)) == []  # capture -> twin -> capture
        deployment = lanes.up(twin, "sglang", "512k")
        assert deployment.status == "serving" and len(nothing_runs(twin)) == 3
        lanes.down(twin)
    finally:
        if twin_rack is not None:
            twin_rack.down()
        else:
            rack.renumber_gid("spark-03", None)
            rack.renumber_gid("spark-04", None)
            rack.kernel("spark-06", None)
        rack.up()  # the twin's node disks go: the standard rack as its inventory says
        for name in TWIN_NODES:
            rack.load_startup(name, LOAD_STARTUP_S)
    standard = capture(engine_rack)
    assert [n["kernel"] for n in standard["nodes"]] == ["6.17.0-1008-nvidia"] * 8
