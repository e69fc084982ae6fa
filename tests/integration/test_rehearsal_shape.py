"""The rehearsal rack shaped like a real Spark rack: a management network and a fabric,
four RoCE functions, cabling, DGX OS's kernel string and a GB10's clocks, a silent
power-off."""

import json
import socket
import subprocess
import sys
import time

import pytest

from sparkrack.fleet import Fleet
from sparkrack.rehearsal.cabling import Cabling

pytestmark = pytest.mark.rack

CONNECT = ("import socket, sys\n"
           "s = socket.socket()\n"
           "s.settimeout(2)\n"
           "if sys.argv[1]: s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, "
           "sys.argv[1].encode())\n"
           "try:\n"
           "    s.connect((sys.argv[2], 22)); print('reached')\n"
           "except OSError as e:\n"
           "    print('refused' if isinstance(e, ConnectionRefusedError) else 'unreachable')\n")


def on(inventory, node, argv):
    with Fleet(inventory, inventory.select(node)) as fleet:
        result = fleet.run(argv)[node]
    assert result.status == "ok", result.stderr
    return result.stdout


def test_a_node_has_a_management_port_and_four_roce_functions(engine_rack):
    inventory = engine_rack  # provisioned: role fabric's MTU on the cabled port
    addresses = {line.split()[0].split("@")[0]: line.split()[1:] for line in
                 on(inventory, "spark-03", ["ip", "-br", "addr"]).splitlines()}
    assert addresses["enP7s7"][:2] == ["UP", "10.77.1.13/24"]
    assert addresses["enp1s0f0np0"][:2] == ["UP", "10.77.3.13/24"]
    assert addresses["enP2p1s0f0np0"][:2] == ["UP", "10.77.4.13/24"]
    for netdev in ("enp1s0f1np1", "enP2p1s0f1np1"):  # port 1 has no cable
        assert addresses[netdev] == ["DOWN"]
    assert on(inventory, "spark-03", ["ibdev2netdev"]).splitlines() == [
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)", "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)",
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)", "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)"]
    mtus = on(inventory, "spark-03", ["cat", "/sys/class/net/enp1s0f0np0/mtu",
                                      "/sys/class/net/enP2p1s0f1np1/mtu"]).split()
    assert mtus == ["9000", "1500"]  # port 1: neither cabled nor in the netplan config
    state = on(inventory, "spark-03", ["cat", "/sys/class/infiniband/rocep1s0f1/ports/1/state",
                                       "/sys/class/infiniband/rocep1s0f0/ports/1/gids/3"])
    assert state.split("\n")[:2] == ["1: DOWN", "0000:0000:0000:0000:0000:ffff:0a4d:030d"]


def test_the_fabric_is_not_reachable_from_the_management_network(inventory):
    python = ["python3", "-c", CONNECT]
    assert on(inventory, "spark-01", [*python, "", "10.77.3.12"]).strip() == "reached"
    assert on(inventory, "spark-01", [*python, "enP7s7", "10.77.3.12"]).strip() == "unreachable"
    assert on(inventory, "spark-01", [*python, "enp1s0f0np0", "10.77.1.12"]).strip() == "unreachable"
    with socket.socket() as sock:  # this machine sits on the management network only
        sock.settimeout(2)
        with pytest.raises(OSError):
            sock.connect(("10.77.3.12", 22))


def test_recabling_to_port_1_moves_the_links_and_is_kept_across_a_power_cycle(rack, inventory,
                                                                            extra_key_line):
    rack.cable("spark-04", Cabling(port=1, paths="one"))
    try:
        lines = on(inventory, "spark-04", ["ibdev2netdev"]).splitlines()
        rack.poweroff("spark-04")
        rack.poweron("spark-04")
        again = on(inventory, "spark-04", ["ibdev2netdev"]).splitlines()
        keys = on(inventory, "spark-04", ["cat", "/etc/ssh/sparkrack_authorized_keys"])
        cabling = next(s for s in rack.status() if s.name == "spark-04").cabling
    finally:
        rack.cable("spark-04", Cabling())
    assert lines == again == [
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)", "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)",
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)", "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)"]
    assert cabling == "port 1, one path"
    assert MARK in keys  # what the disk held before the power cycle is still there


MARK = "sparkrack-rehearsal-test-disk-keeps-this"


@pytest.fixture
def extra_key_line(inventory):
    """A line added to spark-04's authorized-keys file (as the watchdog's key is), taken
    out again afterwards."""
    path = "/etc/ssh/sparkrack_authorized_keys"
    line = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFa {MARK}"
    on(inventory, "spark-04", ["sh", "-c", 'printf "%s\\n" "$1" >> "$2"', "sh", line, path])
    yield
    on(inventory, "spark-04", ["sed", "-i", f"/{MARK}/d", path])
    done = subprocess.run([sys.executable, "-m", "invoke", "rehearsal.cable", "spark-04",
                           "--port", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "--port 2: a Spark's ConnectX-7 has ports 0 and 1" in done.stdout + done.stderr


def test_a_powered_off_node_answers_nothing_and_status_names_it_within_3_s(rack, inventory):
    rack.poweroff("spark-07")
    try:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            with pytest.raises(OSError) as raised:
                sock.connect(("10.77.1.17", 22))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "invoke", "status", "--json", "-i",
                               str(inventory.path)], capture_output=True, text=True, timeout=60)
        seconds = time.monotonic() - started
    finally:
        rack.poweron("spark-07")
    assert not isinstance(raised.value, ConnectionRefusedError)  # no RST: silence
    nodes = {n["node"]: n for n in json.loads(done.stdout)["nodes"]}
    assert nodes["spark-07"]["reachable"] == "unreachable", nodes["spark-07"]
    assert "spark-07 (10.77.1.17): no answer within" in nodes["spark-07"]["error"]
    assert all(n["reachable"] == "ok" for name, n in nodes.items() if name != "spark-07")
    assert nodes["spark-07"]["seconds"] <= 3.0, nodes["spark-07"]  # the node's own deadline
    assert seconds <= 8.0, seconds  # the whole command, Python's start-up included


def test_a_node_reads_as_a_dgx_os_spark_with_a_gb10s_clocks(engine_rack):
    """`uname -r` as on DGX OS; under the clock cap an idle GPU with an engine's memory
    resident sits at 2,184-2,190 MHz (not the 208 MHz of an empty one)."""
    assert on(engine_rack, "spark-02", ["uname", "-r"]).strip() == "6.17.0-1008-nvidia"
    sample = ("import subprocess, sys\n"
              "sys.path.insert(0, '/usr/local/lib/sparkrack-sim')\n"
              "from gpusim.client import GpuSimClient\n"
              "def clock():\n"
              "    return subprocess.run(['nvidia-smi', '--query-gpu=clocks.sm', "
              "'--format=csv,noheader,nounits'], capture_output=True, text=True).stdout.strip()\n"
              "empty = clock()\n"
              "with GpuSimClient() as gpu:\n"
              "    gpu.allocate(1 << 30, 1, 'engine')\n"
              "    print(empty, *(clock() for _ in range(5)))\n")
    empty, *resident = [int(c) for c in on(engine_rack, "spark-02",
                                           ["python3", "-c", sample]).split()]
    assert empty == 208 and all(2184 <= c <= 2190 for c in resident), (empty, resident)


def test_the_fabric_check_passes_jumbo_frames_and_names_a_rail_trained_low(rack, engine_rack):
    from sparkrack.rails import check_fabric

    inventory = engine_rack
    clean = check_fabric(inventory, seconds=0.5)
    assert len(clean.measured) == 16 and all(m.jumbo == "ok" for m in clean.measured)
    assert [p for p in clean.problems if "far below" not in p] == []  # rates: judged below
    rack.cable("spark-02", Cabling(rate_mbit=50))
    try:
        slow = check_fabric(inventory, seconds=0.5)
        done = subprocess.run([sys.executable, "-m", "invoke", "fabric.check", "--seconds",
                               "0.5", "-i", str(inventory.path)], capture_output=True,
                              text=True, timeout=120)
    finally:
        rack.cable("spark-02", Cabling())
    named = [p for p in slow.problems if "far below the rack's median" in p]
    assert any(p.startswith("spark-01 -> spark-02 on enp1s0f0np0 (rocep1s0f0)") for p in named)
    assert all("probably spark-02's" in p for p in named), named
    assert done.returncode == 1 and "PROBLEM: spark-01 -> spark-02 on" in done.stdout
    rack.cable("spark-02", Cabling(paths="one"))  # not an approved QSFP112: one path up
    try:
        one_path = check_fabric(inventory, seconds=0.2)
    finally:
        rack.cable("spark-02", Cabling())
    assert ("spark-01: enP2p1s0f0np0 (roceP2p1s0f0, 10.77.4.11) has no peer on spark-02 in "
            "10.77.4.0/24") in one_path.problems, one_path.problems


def test_the_fabric_check_names_a_port_left_at_mtu_1500(engine_rack):
    """spark-05's port 0 path a at the default MTU: what it sends to any peer is too long at
    once; what any peer sends it is dropped on the way (the small datagram before it
    passes). Every pair is named, not only the ring's neighbours: TP all-to-all needs them."""
    from sparkrack.rails import check_fabric

    inventory = engine_rack
    on(inventory, "spark-05", ["ip", "link", "set", "enp1s0f0np0", "mtu", "1500"])
    try:
        report = check_fabric(inventory, seconds=0.2)
    finally:
        on(inventory, "spark-05", ["ip", "link", "set", "enp1s0f0np0", "mtu", "9000"])
    frames = sorted(p for p in report.problems if "9000-byte frame" in p)
    others = [f"spark-0{n}" for n in (1, 2, 3, 4, 6, 7, 8)]
    assert frames == sorted(
        [f"{node} -> spark-05 on enp1s0f0np0 (rocep1s0f0): a 9000-byte frame did not pass: a "
         "small datagram came back, a 8972-byte one did not within 3 s (a smaller MTU on the "
         "way?)" for node in others]
        + [f"spark-05 -> {node} on enp1s0f0np0 (rocep1s0f0): a 9000-byte frame did not pass: "
           "Message too long sending 8972 bytes (the path's MTU is below 9000)"
           for node in others]), report.problems

BARE_FABRIC = """rm -f /etc/netplan/40-cx7.yaml /etc/netplan/60-sparkrack-fabric.yaml
netplan apply
for dev in enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1; do
  ip addr flush dev "$dev" scope global && ip link set "$dev" mtu 1500
done"""


def test_provisioning_gives_a_bare_fabric_its_addresses_and_jumbo_mtu(engine_rack):
    """spark-06 with no fabric config at all (no install-time file, no drop-in): `provision
    --check` shows role fabric's netplan drop-in and changes nothing; `provision` writes and
    applies it: addresses and MTU 9000 on both paths, full-size frames to the neighbours,
    and a second run changes nothing."""
    from sparkrack.provision import provision
    from sparkrack.rails import check_fabric

    inventory = engine_rack
    installed = on(inventory, "spark-06", ["sh", "-c", "cat /etc/netplan/40-cx7.yaml 2>/dev/null; true"])
    on(inventory, "spark-06", ["sh", "-c", BARE_FABRIC])
    try:
        check = provision(inventory, "spark-06", roles="fabric", check=True)
        planned = [c.summary for c in check.node("spark-06").plan if c.actions]
        bare = on(inventory, "spark-06", ["ip", "-o", "-4", "addr", "show", "dev", "enp1s0f0np0"])
        done = provision(inventory, "spark-06", roles="fabric")
        links = {dev: on(inventory, "spark-06", ["ip", "-o", "-4", "addr", "show", "dev", dev])
                 for dev in ("enp1s0f0np0", "enP2p1s0f0np0")}
        mtu = on(inventory, "spark-06", ["cat", "/sys/class/net/enp1s0f0np0/mtu"]).strip()
        fabric = check_fabric(inventory, seconds=0.2)
        again = provision(inventory, "spark-06", roles="fabric")
    finally:
        if installed:  # the install-time file, unless a take-over moved it aside already
            with Fleet(inventory, inventory.select("spark-06")) as fleet:
                fleet.put({"spark-06": [(installed.encode(), "/etc/netplan/40-cx7.yaml", 0o600)]}
                          ).raise_for_failures()
    assert check.exit_code == 0 and bare == ""
    assert any("60-sparkrack-fabric.yaml" in s for s in planned), planned
    assert any("--take-over" in s for s in planned), planned
    assert done.exit_code == 0 and again.recap("spark-06")["changed"] == 0
    assert " inet 10.77.3.16/24 " in links["enp1s0f0np0"], links
    assert " inet 10.77.4.16/24 " in links["enP2p1s0f0np0"], links
    assert mtu == "9000"
    assert [p for p in fabric.problems if "far below" not in p] == [], fabric.problems
    assert {m.jumbo for m in fabric.measured if "spark-06" in m.pair.name} == {"ok"}
