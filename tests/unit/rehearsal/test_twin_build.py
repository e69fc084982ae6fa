"""The twin's shape and inventory from a capture, without a rack: each node's kernel, GPU,
GID layout and cable as the rehearsal simulates them, refused where it cannot; the
inventory with the capture's names, ranks and vars on rehearsal addresses."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from test_twin_capture import capture_of, one_node

from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.twin.build import node_shapes, write_inventory

REPO = Path(__file__).resolve().parents[3]


def rack_of(*names: str) -> dict:
    return capture_of(*({**one_node(), "name": name, "rank": rank}
                        for rank, name in enumerate(names)))


def test_each_node_gets_its_captured_shape():
    capture = rack_of("gb10-a", "gb10-b", "gb10-c")
    b, c = capture["nodes"][1], capture["nodes"][2]
    b["kernel"] = "6.11.0-1016-nvidia"
    b["functions"]["rocep1s0f0"]["gids"] = ["0 v1 link-local", "1 v2 link-local",
                                            "4 v1 ipv4", "5 v2 ipv4"]
    for hca in ("rocep1s0f0", "roceP2p1s0f0"):
        c["functions"][hca]["state"] = "1: DOWN"
    c["functions"]["rocep1s0f1"]["state"] = "4: ACTIVE"  # port 1, one path
    del c["functions"]["roceP2p1s0f1"]  # a function the node lacks
    shapes = node_shapes(capture)
    assert list(shapes) == ["gb10-a", "gb10-b", "gb10-c"]
    assert shapes["gb10-a"] == {
        "gpu": {"name": "NVIDIA GB10", "driver_version": "580.126.09", "cuda_version": "13.0",
                "mem_total_kb": 127600748},
        "kernel": "6.17.0-1008-nvidia", "gid_index": 3,
        "cabling": {"port": 0, "paths": "both"}, "missing": [],
        "mtu": {"enp1s0f0np0": 9000, "enP2p1s0f0np0": 9000}}
    assert (shapes["gb10-b"]["kernel"], shapes["gb10-b"]["gid_index"]) == (
        "6.11.0-1016-nvidia", 5)
    assert shapes["gb10-c"]["cabling"] == {"port": 1, "paths": "one"}
    assert shapes["gb10-c"]["missing"] == ["roceP2p1s0f1"]


def test_an_even_gid_index_is_a_twin_too():
    # real units put the RoCE v2 IPv4 entry at 6 after one reboot and at 5 after another
    capture = rack_of("gb10-a", "gb10-b")
    capture["nodes"][1]["functions"]["rocep1s0f0"]["gids"] = ["4 v1 ipv4", "6 v2 ipv4"]
    assert node_shapes(capture)["gb10-b"]["gid_index"] == 6


@pytest.mark.parametrize("edit, says", [
    (lambda n: n.update(reachable=False, error="connection refused"),
     "gb10-b did not answer the capture (connection refused)"),
    (lambda n: n["functions"]["rocep1s0f0"].update(gids=["2 v2 ipv4"]),
     "gb10-b: its RoCE v2 IPv4 GID sits at index 2"),
    (lambda n: n["functions"]["rocep1s0f0"].update(state="1: DOWN"),
     "gb10-b: port 0 is up on its second path only"),
    (lambda n: n["functions"]["rocep1s0f1"].update(state="4: ACTIVE"),
     "gb10-b: both QSFP ports are up"),
])
def test_what_the_rehearsal_cannot_be_is_refused_naming_the_node(edit, says):
    capture = rack_of("gb10-a", "gb10-b")
    edit(capture["nodes"][1])
    with pytest.raises(UsageError) as refused:
        node_shapes(capture)
    assert refused.value.line().startswith(says)


def test_the_twins_inventory_has_the_racks_names_ranks_and_vars(tmp_path):
    capture = rack_of("gb10-a", "gb10-b", "gb10-c")
    capture["rack"].update(rack_name="lab", clock_cap_mhz=2100,
                           node_vars={"gb10-c": {"nccl_ib_gid_index": 5}})
    capture["rack"]["images"] = {"sglang": "example.org/sglang:custom"}
    out = write_inventory(capture, REPO / "inventory" / "rehearsal", tmp_path / "twin")
    twin = load_inventory(out)
    assert [(n.name, n.rank, n.address, n.roce_addr) for n in twin.nodes] == [
        ("gb10-a", 0, "10.77.1.11", "10.77.3.11"), ("gb10-b", 1, "10.77.1.12", "10.77.3.12"),
        ("gb10-c", 2, "10.77.1.13", "10.77.3.13")]
    assert (twin.vars.rack_name, twin.vars.tp_size, twin.vars.clock_cap_mhz) == ("lab", 3, 2100)
    assert twin.is_rehearsal and twin.node("gb10-c").vars.nccl_ib_gid_index == 5
    assert dict(twin.vars.pdu.outlets) == {"gb10-a": 1, "gb10-b": 2, "gb10-c": 3}
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    assert twin.vars.images == rehearsal.vars.images  # the rehearsal's stub engines
    assert twin.vars.known_hosts_file == rehearsal.vars.known_hosts_file
    again = copy.deepcopy(capture)
    again["rack"]["node_vars"] = {}
    write_inventory(again, REPO / "inventory" / "rehearsal", tmp_path / "twin")
    assert list((out / "host_vars").iterdir()) == []  # the old node's vars are gone
    assert yaml.safe_load((out / "hosts.yml").read_text())["all"]["children"]["sparks"][
        "vars"]["ansible_user"] == "root"
