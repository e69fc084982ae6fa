"""Extra rehearsal nodes: their checks, their record, their node files (no rack needed)."""

import json

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.rehearsal import extras, nodefs
from sparkrack.rehearsal.extras import ExtraNode, check_extra
from sparkrack.rehearsal.layout import NodeLayout


def test_extra_node_checks():
    taken_names, taken_addresses = {"spark-01"}, {"10.77.1.11"}
    check_extra(ExtraNode("spark-09", "10.77.1.19", "575.51.03", ("roceP2p1s0f0",),
                          "7.0.0-1019-nvidia"), taken_names, taken_addresses)
    for extra, why in (
            (ExtraNode("spark-01", "10.77.1.19"), "already a rehearsal node"),
            (ExtraNode("Spark 9", "10.77.1.19"), "invalid node name"),
            (ExtraNode("spark-09", "10.77.1.11"), "taken"),
            (ExtraNode("spark-09", "10.77.2.19"), "not a node address"),
            (ExtraNode("spark-09", "10.77.1.254"), "not a node address"),
            (ExtraNode("spark-09", "192.0.2.9"), "not a node address"),
            (ExtraNode("spark-09", "10.77.1.19", "575"), "not a driver version"),
            (ExtraNode("spark-09", "10.77.1.19", missing_hcas=("mlx5_0",)), "no such HCA"),
            (ExtraNode("spark-09", "10.77.1.19", kernel="6.8; rm -rf /"), "not a kernel")):
        with pytest.raises(UsageError, match=why):
            check_extra(extra, taken_names, taken_addresses)


def test_extra_nodes_record_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(extras, "EXTRA_NODES_FILE", tmp_path / "extra-nodes.json")
    assert extras.read_extras() == {}
    node = ExtraNode("spark-10", "10.77.1.20", "575.51.03", ("roceP2p1s0f0",), None)
    extras.write_extras({"spark-10": node})
    assert json.loads((tmp_path / "extra-nodes.json").read_text()) == {"spark-10": {
        "address": "10.77.1.20", "driver_version": "575.51.03",
        "missing_hcas": ["roceP2p1s0f0"], "kernel": None}}
    assert extras.read_extras() == {"spark-10": node}
    assert node.gpu == {"driver_version": "575.51.03"} and ExtraNode("a", "b").gpu == {}
    extras.write_extras({})
    assert not (tmp_path / "extra-nodes.json").exists()


def test_bare_node_files(tmp_path, monkeypatch):
    monkeypatch.setattr(NodeLayout, "upper", property(lambda self: tmp_path / self.name))
    node = NodeLayout("spark-10", "10.77.1.20")
    nodefs.write_hardware(node, ["roceP2p1s0f0"])
    hardware = json.loads((tmp_path / "spark-10/etc/gpu-sim/hardware.json").read_text())
    assert hardware["missing"] == ["roceP2p1s0f0"] and "ipv4" not in hardware  # the netdevs'
    assert hardware["hcas"] == {"rocep1s0f0": "enp1s0f0np0", "roceP2p1s0f0": "enP2p1s0f0np0",
                                "rocep1s0f1": "enp1s0f1np1", "roceP2p1s0f1": "enP2p1s0f1np1"}
    nodefs.write_kernel(node, "7.0.0-1019-nvidia")
    uname = tmp_path / "spark-10/usr/local/bin/uname"
    assert "-r) echo 7.0.0-1019-nvidia ;;" in uname.read_text()
    import subprocess

    assert subprocess.run([str(uname), "-r"], capture_output=True, text=True).stdout == \
        "7.0.0-1019-nvidia\n"
    assert subprocess.run([str(uname), "-s"], capture_output=True, text=True).stdout == "Linux\n"
    nodefs.write_kernel(node, None)  # back to what a DGX OS Spark reports
    assert subprocess.run([str(uname), "-r"], capture_output=True, text=True).stdout == \
        "6.17.0-1008-nvidia\n"
    with pytest.raises(ValueError):
        nodefs.write_kernel(node, "7.0'; reboot")


def test_a_kernel_on_a_node_disk_says_what_the_simulated_driver_shows(tmp_path, monkeypatch):
    """The release, whether KHO breaks its CMA (public reports: 7.0.0-1019-nvidia) and the
    added command-line parameters, for gpusimd to show."""
    monkeypatch.setattr(NodeLayout, "upper", property(lambda self: tmp_path / self.name))
    node = NodeLayout("spark-06", "10.77.1.16")
    kernel = tmp_path / "spark-06/etc/gpu-sim/kernel.json"
    nodefs.write_kernel(node, "7.0.0-1019-nvidia")
    assert json.loads(kernel.read_text()) == {
        "release": "7.0.0-1019-nvidia", "kho_cma_bug": True, "cmdline_extra": ""}
    nodefs.write_kernel(node, "7.0.0-1019-nvidia", cmdline=" kho=off ")
    assert json.loads(kernel.read_text())["cmdline_extra"] == "kho=off"
    nodefs.write_kernel(node, "7.0.0-1031-nvidia", kho_bug=True)
    assert json.loads(kernel.read_text())["kho_cma_bug"] is True
    nodefs.write_kernel(node, None)
    assert json.loads(kernel.read_text()) == {
        "release": "6.17.0-1008-nvidia", "kho_cma_bug": False, "cmdline_extra": ""}
    with pytest.raises(ValueError, match="kernel parameter"):
        nodefs.write_kernel(node, None, cmdline="kho=off; reboot")


def test_a_nodes_network_daemon_is_kept_on_its_disk(tmp_path, monkeypatch):
    """networkd by default with NetworkManager masked (this machine has it installed); set
    to NetworkManager, that is enabled and networkd only disabled (netplan apply starts it
    for its .link files); the running node's links (LINKS_SCRIPT) are the same."""
    import os
    import subprocess

    from sparkrack.rehearsal.faults.network import LINKS_SCRIPT

    monkeypatch.setattr(NodeLayout, "upper", property(lambda self: tmp_path / self.name))
    node = NodeLayout("spark-10", "10.77.1.20")
    system = tmp_path / "spark-10/etc/systemd/system"
    assert nodefs.network_daemon(node) == "networkd"
    nodefs.write_network_daemon(node, "networkd")
    assert os.readlink(system / "NetworkManager.service") == "/dev/null"
    assert os.readlink(system / "multi-user.target.wants/systemd-networkd.service") == \
        "/lib/systemd/system/systemd-networkd.service"
    nodefs.write_network_daemon(node, "NetworkManager")
    assert nodefs.network_daemon(node) == "NetworkManager"
    assert not (system / "NetworkManager.service").is_symlink()
    assert not (system / "multi-user.target.wants/systemd-networkd.service").is_symlink()
    assert not (system / "systemd-networkd.service").is_symlink()  # not masked
    running = tmp_path / "running"  # what the script does on a node's root, here under tmp
    script = LINKS_SCRIPT.replace('"/$1"', '"$ROOT/$1"')
    args = [item or "" for link in nodefs.daemon_links("NetworkManager") for item in link]
    subprocess.run(["sh", "-c", script, "sh", *args], check=True,
                   env={**os.environ, "ROOT": str(running)})
    assert os.readlink(running / "etc/systemd/system/multi-user.target.wants/"
                                 "NetworkManager.service") == \
        "/lib/systemd/system/NetworkManager.service"


def test_the_simulators_land_on_a_node_folder_by_folder(tmp_path, monkeypatch):
    """sim/'s folders as they are under /usr/local/lib/sparkrack-sim, what an earlier flat
    layout left there removed, and each command on PATH running from its folder."""
    import os
    import subprocess
    from pathlib import Path

    monkeypatch.setattr(NodeLayout, "upper", property(lambda self: tmp_path / self.name))
    node = NodeLayout("spark-10", "10.77.1.20")
    lib = tmp_path / "spark-10" / nodefs.SIM_LIB
    (lib / "__pycache__").mkdir(parents=True)
    for stale in ("nvidia-smi", "gpusim_client.py", "nvsmi_help.txt"):
        (lib / stale).write_text("# the flat layout's\n")
    nodefs.install_sim(node)
    sim = Path(nodefs.__file__).parent / "sim"
    shipped = {str(p.relative_to(sim)) for p in sim.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert {"gpusim/client.py", "nvsmi/nvidia-smi", "roce/roce-mount"} <= shipped
    assert {str(p.relative_to(lib)) for p in lib.rglob("*") if p.is_file()} == shipped
    for command, path in nodefs.SIM_COMMANDS.items():
        link = tmp_path / "spark-10/usr/local/bin" / command
        assert os.readlink(link) == f"/{nodefs.SIM_LIB}/{path}"
        assert os.access(lib / path, os.X_OK), path
    smi = subprocess.run([str(lib / "nvsmi/nvidia-smi"), "-h"], capture_output=True, text=True,
                         env={"GPU_SIM_CONFIG": str(tmp_path / "none.json")}, timeout=10)
    assert smi.returncode == 0 and smi.stdout.startswith("NVIDIA System Management"), smi
    load = subprocess.run([str(lib / "gpusim/gpu-sim"), "load", "-h"], capture_output=True,
                          text=True, timeout=10)
    assert load.returncode == 0 and "--seconds" in load.stdout, load.stderr
