"""A fleet of two rehearsal racks behind one router, on this machine: the second rack
boots beside the session's (its own addresses, bridges, cgroups and state) for this
module only. docs/fleet.md"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import rackhealth
from stubgroup import nothing_runs, quick_burn

from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.rehearsal.rack import RehearsalRack
from sparkrack.rehearsal.stub.modeldir import write_stub_model

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
STUB = {"load_delay_s": 0.3, "tokens_per_s": 50, "drain_poll_s": 0.5}


def meminfo() -> dict[str, int]:
    return {line.split(":")[0]: int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()}


@pytest.fixture(scope="module")
def second_rack(rack):
    """The second rack, booted beside the session's for this module, provisioned; taken
    down at the end of the module."""
    second = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal-2"),
                           say=lambda msg: None)
    before = meminfo()["MemAvailable"]
    began = time.monotonic()
    second.up()
    booted = time.monotonic() - began
    try:
        rackhealth.repair_faults(second)
        rackhealth.provisioned(second.inventory)
        for node in second.nodes:
            second.load_startup(node.name, rackhealth.LOAD_STARTUP_S)
        with Fleet(second.inventory) as fleet:
            write_stub_model(fleet, STUB)
        print(f"second rack: booted in {booted:.1f} s, "
              f"{(before - meminfo()['MemAvailable']) / 2**20:.2f} GiB")
        yield second
    finally:
        lanes.down(second.inventory)
        second.down()


@pytest.fixture
def racks(engine_rack, second_rack):
    """Both racks' inventories, nothing running on either at the start and the end."""
    yield engine_rack, second_rack.inventory
    for inventory in (engine_rack, second_rack.inventory):
        lanes.down(inventory)


def test_the_second_rack_serves_beside_the_first(racks):
    first, second = racks
    lanes.up(first, "sglang", "512k", burn=quick_burn)
    lanes.up(second, "vllm", "512k", burn=quick_burn)
    assert {r.engine for r in nothing_runs(first)} == {"sglang"}
    assert {(r.engine, r.node) for r in nothing_runs(second) if r.rank == 0} == \
        {("vllm", "spark-11")}
