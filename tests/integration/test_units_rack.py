"""Real Sparks differ from one another, and the rehearsal's nodes do as real units do: each
its own MemTotal and wall idle power, a latched GPU wandering low, one adapter identity
for the four RoCE functions, `-pl` refused in the real tool's words."""

import json

import pytest
from simunits import UNIT_IDLE_W, UNIT_MEM_TOTAL_KB, mem_total_kb

from sparkrack.fleet import Fleet
from sparkrack.status.rows import gather_status

pytestmark = pytest.mark.rack

SAMPLE = ("for i in 1 2 3 4 5 6 7 8 9 10; do nvidia-smi --query-gpu=utilization.gpu,clocks.sm,"
          "power.draw --format=csv,noheader,nounits; sleep 0.3; done")


def test_each_unit_has_its_own_memtotal_and_status_reads_it(inventory):
    with Fleet(inventory) as fleet:
        meminfo = fleet.run(["grep", "^MemTotal:", "/proc/meminfo"])
    shown = {r.node: int(r.stdout.split()[1]) for r in meminfo}
    low, high = UNIT_MEM_TOTAL_KB
    assert all(low <= kb <= high for kb in shown.values()), shown
    assert len(set(shown.values())) > 4, shown  # units differ, as real ones do
    rows = gather_status(inventory)
    assert {row.node: row.facts.mem_total_kb for row in rows} == shown
    assert shown == {name: mem_total_kb(name) for name in shown}  # the same every boot


def test_an_idle_unit_draws_25_to_37_w_at_the_wall(inventory):
    with Fleet(inventory, inventory.select("spark-02,spark-07")) as fleet:
        states = fleet.run(["gpu-sim", "state"])
    low, high = UNIT_IDLE_W
    for r in states:
        state = json.loads(r.stdout)
        if state["util"] == 0:
            assert low <= state["node_power_w"] <= high, (r.node, state)


def test_a_latched_gpu_wanders_between_481_and_858_mhz_at_6_to_16_w(rack, inventory):
    rack.latch("spark-05")
    try:
        with Fleet(inventory, inventory.select("spark-05")) as fleet:
            done = fleet.run(["sh", "-c", "gpu-sim load --seconds 5 --startup 0 & " + SAMPLE
                              + "; wait"], timeout=60)["spark-05"]
    finally:
        rack.latch("spark-05", on=False)
    samples = [[float(v) for v in line.split(",")] for line in done.stdout.splitlines()]
    busy = [(clock, watts) for util, clock, watts in samples if util >= 50]
    assert busy, done.stdout
    assert all(481 <= clock <= 858 and 5.8 <= watts <= 15.8 for clock, watts in busy), busy


def test_the_four_functions_share_one_adapter_identity_and_firmware(inventory):
    read = ("for f in /sys/class/infiniband/*; do echo $(basename $f) $(cat $f/sys_image_guid)"
            " $(cat $f/node_guid) $(cat $f/fw_ver); done")
    with Fleet(inventory, inventory.select("spark-03,spark-04")) as fleet:
        found = fleet.run(["sh", "-c", read])
    adapters = []
    for r in found:
        rows = [line.split() for line in r.stdout.splitlines()]
        assert len(rows) == 4, r.stdout
        assert len({row[1] for row in rows}) == 1 and len({row[2] for row in rows}) == 4
        assert {row[3] for row in rows} == {"28.45.4028"}
        adapters.append(rows[0][1])
    assert adapters[0] != adapters[1]  # one adapter per node


def test_power_limit_is_not_supported_in_current_scope(inventory):
    with Fleet(inventory, inventory.select("spark-06")) as fleet:
        done = fleet.run(["nvidia-smi", "-pl", "100"])["spark-06"]
    assert done.exit_code == 0
    assert done.stdout.splitlines() == [
        "Changing power management limit is not supported in current scope for GPU: "
        "0000000F:01:00.0.", "Treating as warning and moving on.", "All done."]
