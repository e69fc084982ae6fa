"""The renderer in force for the fabric's netdevs: netplan's files as a node holds them,
merged as netplan 0.106 merges them (checked against the real `netplan get` when this
machine has netplan), and the refusal when that daemon does not run."""

import os
import subprocess

import pytest
import yaml
from hosttools import need

from sparkrack.facts import provision as g
from sparkrack.facts.netplan import (
    DAEMON_QUERIES,
    NETPLAN,
    NetplanFile,
    Renderer,
    parse_netplan,
    problem,
    renderer_for,
    renderer_of,
)
from sparkrack.facts.queries import PYTHON
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.facts.systemd import UnitFacts

CX7 = "/etc/netplan/40-cx7.yaml"
OURS = "/etc/netplan/60-sparkrack-fabric.yaml"
NM_GLOBAL = "network:\n  version: 2\n  renderer: NetworkManager\n"
DEVICES = "network:\n  version: 2\n  ethernets:\n    e1:\n      mtu: 9000\n    e2:\n      mtu: 9000\n"
RUNNING = UnitFacts(load="loaded", active="active", enabled="enabled")
UNITS = {"systemd-networkd.service": RUNNING, "NetworkManager.service": RUNNING}

# (files in netplan's order, {netdev: renderer netplan gives it})
LAYOUTS = [
    ([DEVICES], {"e1": "networkd", "e2": "networkd"}),
    ([NM_GLOBAL, DEVICES], {"e1": "NetworkManager", "e2": "NetworkManager"}),
    ([DEVICES, NM_GLOBAL], {"e1": "NetworkManager", "e2": "NetworkManager"}),
    ([NM_GLOBAL, DEVICES, "network:\n  version: 2\n  renderer: networkd\n"],
     {"e1": "networkd", "e2": "networkd"}),
    # a device's own renderer beats any global one and sticks across later files
    (["network:\n  version: 2\n  ethernets:\n    e1:\n      renderer: NetworkManager\n",
      "network:\n  version: 2\n  renderer: networkd\n", DEVICES],
     {"e1": "NetworkManager", "e2": "networkd"}),
    (["network:\n  version: 2\n  ethernets:\n    e1:\n      renderer: NetworkManager\n",
      "network:\n  version: 2\n  ethernets:\n    e1:\n      renderer: networkd\n"],
     {"e1": "networkd", "e2": "networkd"}),
    # a type-wide renderer reaches the devices after it in the same block only
    (["network:\n  version: 2\n  ethernets:\n    renderer: NetworkManager\n    e1:\n"
      "      mtu: 1500\n", DEVICES], {"e1": "NetworkManager", "e2": "networkd"}),
    (["network:\n  version: 2\n  ethernets:\n    e1:\n      mtu: 1500\n"
      "    renderer: NetworkManager\n    e2:\n      mtu: 1500\n"],
     {"e1": "networkd", "e2": "NetworkManager"}),
]


def files_of(texts):
    return [NetplanFile(f"/etc/netplan/{10 * (i + 1)}-x.yaml", text)
            for i, text in enumerate(texts)]


@pytest.mark.parametrize("texts,want", LAYOUTS)
def test_each_netdev_gets_the_renderer_netplan_merges(texts, want):
    files = files_of(texts)
    assert {dev: renderer_of(files, dev).name for dev in want} == want


@pytest.mark.parametrize("texts,want", LAYOUTS)
def test_the_merge_is_netplans_own(texts, want, tmp_path):
    """The model against the real `netplan get` (the rack's host needs netplan.io)."""
    need("netplan")
    folder = tmp_path / "etc/netplan"
    folder.mkdir(parents=True)
    for item in files_of(texts):
        path = tmp_path / item.path.lstrip("/")
        path.write_text(item.text)
        path.chmod(0o600)
    done = subprocess.run(["netplan", "get", "--root-dir", str(tmp_path), "all"],
                          capture_output=True, text=True, check=True)
    network = yaml.safe_load(done.stdout)["network"]
    real = {dev: (network.get("ethernets", {}).get(dev) or {}).get(
        "renderer", network.get("renderer", "networkd")) for dev in want}
    assert real == want


def test_the_source_is_the_file_that_names_the_renderer():
    files = [NetplanFile(CX7, NM_GLOBAL), NetplanFile(OURS, DEVICES)]
    assert renderer_of(files, "e1") == Renderer("NetworkManager", CX7)
    assert renderer_of([NetplanFile(OURS, DEVICES)], "e1") == Renderer("networkd")


def test_the_drop_in_keeps_the_nodes_renderer_across_the_take_over():
    """Another file's renderer first; then the drop-in's own while that daemon runs (NVIDIA's
    file was moved aside); then NetworkManager when it is the one daemon that runs."""
    mine = NetplanFile(OURS, "network:\n  version: 2\n  ethernets:\n    e1:\n"
                             "      renderer: NetworkManager\n")
    off = UnitFacts(load="masked", enabled="masked")
    nm_only = {"NetworkManager.service": RUNNING}
    networkd_only = {"systemd-networkd.service": RUNNING, "NetworkManager.service": off}
    cx7 = NetplanFile(CX7, NM_GLOBAL)
    assert renderer_for([cx7, mine], UNITS, "e1", OURS) == Renderer("NetworkManager", CX7)
    assert renderer_for([mine], UNITS, "e1", OURS) == Renderer("NetworkManager", OURS)
    assert renderer_for([mine], networkd_only, "e1", OURS) == Renderer("networkd")
    assert renderer_for([], nm_only, "e1", OURS).name == "NetworkManager"
    assert renderer_for([], UNITS, "e1", OURS) == Renderer("networkd")  # both run: default
    networkd = NetplanFile(CX7, "network:\n  version: 2\n  renderer: networkd\n")
    assert renderer_for([networkd, mine], UNITS, "e1", OURS) == Renderer("networkd", CX7)
    assert problem([mine], networkd_only, ["e1"], OURS) == ""  # back to networkd, no refusal


def test_networkmanager_not_running_is_refused_naming_the_file_and_the_fix():
    files = [NetplanFile(CX7, NM_GLOBAL), NetplanFile(OURS, DEVICES)]
    masked = {**UNITS, "NetworkManager.service": UnitFacts(load="masked", enabled="masked")}
    text = problem(files, masked, ["e1"])
    assert text == (
        "/etc/netplan/40-cx7.yaml renders e1 with NetworkManager, whose NetworkManager.service "
        "is masked, inactive, masked (the addresses would not be there after a reboot): "
        "`systemctl unmask NetworkManager.service && systemctl enable --now "
        "NetworkManager.service`, or set `renderer: networkd` in /etc/netplan/40-cx7.yaml")
    assert "install network-manager" in problem(files, {}, ["e1"])
    assert problem(files, UNITS, ["e1", "e2"]) == ""


def test_running_but_not_enabled_is_refused_it_would_not_come_back_after_a_reboot():
    files = [NetplanFile(OURS, DEVICES)]
    started = {"systemd-networkd.service": UnitFacts(load="loaded", active="active",
                                                     enabled="disabled")}
    text = problem(files, started, ["e1"])
    assert text.startswith("netplan's default renders e1 with networkd, whose "
                           "systemd-networkd.service is loaded, active, disabled")
    assert text.endswith("or set `renderer: NetworkManager` in a file under /etc/netplan")


def test_a_renderer_netplan_cannot_drive_and_unreadable_yaml_are_refused():
    odd = [NetplanFile(CX7, "network:\n  version: 2\n  renderer: sriov\n")]
    assert problem(odd, UNITS, ["e1"]) == (
        "/etc/netplan/40-cx7.yaml renders e1 with sriov, which netplan cannot drive here: "
        "set `renderer: networkd` or `renderer: NetworkManager` there")
    assert problem([NetplanFile(CX7, "network: [")], UNITS, ["e1"]).startswith(
        "netplan cannot read /etc/netplan/40-cx7.yaml")
    assert problem([NetplanFile(CX7, None)], UNITS, ["e1"]).startswith("netplan cannot read")
    assert problem(None, {}, ["e1"]) == ""  # not gathered: nothing to say


def test_the_node_script_reads_netplans_files_in_its_order(tmp_path, monkeypatch):
    from sparkrack.remote import gather as node

    lib, etc, run = (tmp_path / d for d in ("lib", "etc", "run"))
    for folder in (lib, etc, run):
        folder.mkdir()
    (lib / "10-a.yaml").write_text("lib a")
    (etc / "10-a.yaml").write_text("etc a")  # shadows /lib's
    (etc / "40-cx7.yaml").write_text(NM_GLOBAL)
    (run / "40-cx7.yaml").write_text("run cx7")  # shadows /etc's
    (etc / "20-b.yaml").write_text("b")
    (etc / "20-b.yaml").chmod(0)
    (etc / "30-c.yml").write_text("not read")
    monkeypatch.setattr(node, "NETPLAN_DIRS", (str(lib), str(etc), str(run)))
    queries = [NETPLAN, *DAEMON_QUERIES]
    lines = []
    monkeypatch.setattr(node.sys.stdout, "write", lines.append)
    node.main(gather_argv(queries)[len(PYTHON) + 1:])
    facts = g.parse_facts("".join(lines), queries)
    readable = os.geteuid() == 0  # root reads a file of mode 0
    assert facts.netplan == (
        NetplanFile(f"{etc}/10-a.yaml", "etc a"),
        NetplanFile(f"{etc}/20-b.yaml", "b" if readable else None),
        NetplanFile(f"{run}/40-cx7.yaml", "run cx7"))
    assert set(facts.units) == {"systemd-networkd.service", "NetworkManager.service"}


def test_parse_netplan_keeps_an_unreadable_file_as_none():
    assert parse_netplan(["file /etc/netplan/a.yaml", "file /etc/netplan/b.yaml",
                          "content bmV0d29yazoge30K"]) == (
        NetplanFile("/etc/netplan/a.yaml", None), NetplanFile("/etc/netplan/b.yaml",
                                                              "network: {}\n"))
