"""The rehearsal's fabric switch as real ones come (MTU 1500 until set, links at 200G or
100G on a breakout) and NCCL's socket bootstrap over the management port, as NVIDIA's
scripts run it: fabric.check names what a switch left as it ships does, the engines fail
where NCCL would, and an inventory with nccl_socket_ifname: enP7s7 provisions and serves.
Each test puts the switch and the rack's provisioning back as it found them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from stubgroup import nothing_runs

from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.lifecycle.start import StartFailed
from sparkrack.provision import provision
from sparkrack.rehearsal.switch import Switch

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]


def on(inventory, node, argv) -> str:
    with Fleet(inventory, inventory.select(node)) as fleet:
        result = fleet.run(argv)[node]
    assert result.status == "ok", result.stderr
    return result.stdout


@pytest.fixture
def as_configured(engine_rack, rack):
    """No engine before and after; the switch back as the inventory says afterwards."""
    lanes.down(engine_rack)
    yield engine_rack
    lanes.down(engine_rack)
    rack.set_switch(Switch(engine_rack.vars.rehearsal_switch_mtu))


def test_a_switch_left_at_1500_is_named_by_the_check_and_fails_the_first_collective(
        as_configured, rack):
    """Nodes provisioned at 9000 behind ports still at 1500: every rail's full-size frame
    and burst are named; `up` fails as NCCL does, its RDMA writes (4096-byte path MTU)
    never acknowledged; the switch at 9000, the same rack serves."""
    from sparkrack.rails import check_fabric

    inventory = as_configured
    rack.set_switch(Switch(1500))
    report = check_fabric(inventory, seconds=0.3)
    with pytest.raises(StartFailed) as failure:
        lanes.up(inventory, "sglang", "512k")
    assert nothing_runs(inventory) == []
    frames = [p for p in report.problems if "a 9000-byte frame did not pass" in p]
    assert len(frames) == 16 * 7, report.problems  # every rail to every other node
    assert all(m.error for m in report.measured), report.as_dict()  # the bursts stall
    # every rank's writes go unacknowledged; `up` sums up the first rank to exit by NCCL's
    # own error line: its retry error, or rank 0's after such a peer went (which comes
    # first varies)
    text = str(failure.value)
    assert "ncclRemoteError: " in text and ("IBV_WC_RETRY_EXC_ERR" in text
                                            or "closed its connection" in text), text
    rack.set_switch(Switch(9000))
    # a second of bursts: 0.3 s on a busy machine can read one rail at a fraction of its rate
    assert check_fabric(inventory, seconds=1.0).problems == []
    lanes.up(inventory, "sglang", "512k")


def test_a_link_on_a_breakout_reads_100g_on_its_hca_and_the_check_names_it(as_configured,
                                                                           rack):
    """`rehearsal.switch --port spark-03:roceP2p1s0f0 --rate 100`: the HCA's ports/1/rate
    reads as mlx5 prints a 100G leg, kept across a reboot; fabric.check names the link as
    below the rack's 200G (exit 1), and judges the rail's throughput by its own rate."""
    inventory = as_configured
    done = subprocess.run([sys.executable, "-m", "invoke", "rehearsal.switch", "--port",
                           "spark-03:roceP2p1s0f0", "--rate", "100"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rates = "/sys/class/infiniband/{}/ports/1/rate"
    first = on(inventory, "spark-03", ["cat", rates.format("roceP2p1s0f0"),
                                       rates.format("rocep1s0f0")]).splitlines()
    rack.reboot("spark-03")
    again = on(inventory, "spark-03", ["cat", rates.format("roceP2p1s0f0")]).strip()
    check = subprocess.run([sys.executable, "-m", "invoke", "fabric.check", "--seconds", "0.3",
                            "-i", str(inventory.path)], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    assert first == ["100 Gb/sec (2X HDR)", "200 Gb/sec (2X NDR)"] and again == first[0]
    assert check.returncode == 1, check.stdout + check.stderr
    problems = [line for line in check.stdout.splitlines() if line.startswith("PROBLEM")]
    assert problems[0] == (
        "PROBLEM: spark-03: enP2p1s0f0np0 (roceP2p1s0f0) negotiated 100 Gb/sec (2X HDR), "
        "below the rack's 200 Gb/sec (fabric_link_gbit): a breakout leg, a cable or a switch "
        "port set slower"), check.stdout
    # at half the rack's rate the rail may also fall under half its median: that rail only
    assert all("spark-03" in p and "enP2p1s0f0np0" in p and "floor" not in p
               for p in problems), check.stdout


def socket_over_management(tmp_path) -> Path:
    """The rehearsal inventory as NVIDIA's scripts set NCCL up: its socket bootstrap (and
    Gloo's, the rendezvous, the advertised addresses) over enP7s7; RDMA over the cabled
    port's functions, which keep their fabric addresses."""
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    rack_vars = inv / "group_vars" / "all.yml"
    rack_vars.write_text(rack_vars.read_text().replace("nccl_socket_ifname: enp1s0f0np0",
                                                       "nccl_socket_ifname: enP7s7"))
    return inv


def test_nccl_over_the_management_port_provisions_and_serves_and_keeps_it_at_1500(
        as_configured, tmp_path):
    inventory = load_inventory(socket_over_management(tmp_path))
    try:
        report = provision(inventory, roles="fabric,nccl_env")
        dropin = on(inventory, "spark-02", ["cat", "/etc/netplan/60-sparkrack-fabric.yaml"])
        env = on(inventory, "spark-02", ["cat", "/etc/sparkrack/nccl.env"])
        mtus = on(inventory, "spark-02", ["cat", "/sys/class/net/enP7s7/mtu",
                                          "/sys/class/net/enp1s0f0np0/mtu"]).split()
        deployment = lanes.up(inventory, "sglang", "512k")
        lanes.down(inventory)
    finally:
        assert provision(as_configured, roles="fabric,nccl_env").exit_code == 0
    assert report.exit_code == 0
    assert "enP7s7" not in dropin and "mtu: 9000" in dropin
    assert "NCCL_SOCKET_IFNAME=enP7s7" in env and "SGLANG_HOST_IP=10.77.1.12" in env
    assert mtus == ["1500", "9000"]
    assert deployment.engine == "sglang"
