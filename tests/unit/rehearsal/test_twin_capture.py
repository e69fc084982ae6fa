"""`invoke facts.capture` without a rack: a node's answers as the capture records them (the
GID table's layout, never an address), the file read back and refused when it is not a
capture, and `--diff`'s lines for a rack that changed."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sparkrack.core.errors import UsageError
from sparkrack.facts import capture as shape
from sparkrack.facts.queries import answer
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.twin.capture import dump, read, write
from sparkrack.rehearsal.twin.diff import differences

REPO = Path(__file__).resolve().parents[3]
TYPES = ["0:IB/RoCE v1", "1:RoCE v2", "2:IB/RoCE v1", "3:RoCE v2"]
GIDS = ["0:fe80:0000:0000:0000:0a00:27ff:fe00:0011", "1:fe80:0000:0000:0000:0a00:27ff:fe00:0011",
        "2:0000:0000:0000:0000:0000:ffff:0a4d:030b", "3:0000:0000:0000:0000:0000:ffff:0a4d:030b"]


def hca_lines(state: str, netdev: str) -> list[str]:
    return ["present", f"state {state}", "rate 200 Gb/sec (4X NDR)", f"netdev {netdev}",
            "types", *TYPES, "gids", *GIDS]


def node_output() -> str:
    """What gather.py prints for the capture's queries on a Spark cabled on port 0."""
    sections = {
        "s": ["hostname spark-a", "kernel 6.17.0-1008-nvidia", "os DGX OS 7.4.0",
              "gpu 0 NVIDIA GB10, 208, 3003, 4.1, 41, 0, P8, Enabled, 580.126.09, 12.1",
              "MemAvailable 120000000", "MemTotal 127600748"],
        "v": ["cuda 13.0"],
        "d": ["version 28.3.3", "runtimes nvidia runc"],
        "u": ["LoadState=loaded", "ActiveState=active", "Result=success",
              "UnitFileState=enabled"],
        "r0": hca_lines("4: ACTIVE", "enp1s0f0np0"), "r1": hca_lines("4: ACTIVE", "enP2p1s0f0np0"),
        "r2": hca_lines("1: DOWN", "enp1s0f1np1"), "r3": hca_lines("1: DOWN", "enP2p1s0f1np1"),
        "l": ["netdev enP2p1s0f0np0 mtu=9000 state=up ipv4=10.77.4.11/24",
              "netdev enP2p1s0f1np1 mtu=1500 state=down ipv4=-",
              "netdev enp1s0f0np0 mtu=9000 state=up ipv4=10.77.3.11/24",
              "netdev enp1s0f1np1 mtu=1500 state=down ipv4=-"],
    }
    kinds = ["s", "v", "d", "u", "r0", "r1", "r2", "r3", "l"]
    out = ["@@base", "b00t-1d", "1796036605.5"]
    for index, key in enumerate(kinds):
        out += ["", f"@@{index} {key[0]}", *sections[key]]
    return "\n".join(out) + "\n"


def one_node() -> dict:
    return shape.node_capture("spark-01", 0, answer(node_output(), shape.queries()))


def test_a_node_is_recorded_with_its_gid_layout_and_no_address():
    node = one_node()
    assert (node["kernel"], node["gpu"], node["driver"], node["cuda"], node["memory_kib"],
            node["docker"]) == ("6.17.0-1008-nvidia", "NVIDIA GB10", "580.126.09", "13.0",
                                127600748, "28.3.3")
    assert node["clock_cap_unit"] == {"load": "loaded", "active": "active",
                                      "result": "success", "enabled": "enabled"}
    assert node["cabled"] == ["roceP2p1s0f0", "rocep1s0f0"]
    function = node["functions"]["rocep1s0f0"]
    assert function == {"state": "4: ACTIVE", "rate": "200 Gb/sec (4X NDR)",
                        "netdevs": {"enp1s0f0np0": {"mtu": 9000, "state": "up"}},
                        "gids": ["0 v1 link-local", "1 v2 link-local", "2 v1 ipv4", "3 v2 ipv4"]}
    assert node["functions"]["rocep1s0f1"]["netdevs"]["enp1s0f1np1"] == {"mtu": 1500,
                                                                         "state": "down"}
    text = dump({"nodes": [node]})
    for secret in ("10.77", "0a4d", "fe80", "spark-a", "ipv4="):  # addresses, the hostname
        assert secret not in text


def test_the_rack_record_holds_its_shape_and_what_a_node_does_differently():
    fixture = load_inventory(Path(__file__).parents[1] / "data" / "inventory")  # spark-04: GID 5
    rack = shape.rack_record(fixture)
    assert (rack["tp_size"], rack["clock_cap_mhz"]) == (4, 2100)
    assert rack["node_vars"] == {"spark-04": {"nccl_ib_gid_index": 5}}
    text = yaml.safe_dump(rack)
    for secret in ("ansible_host", "ansible_user", "known_hosts", "192.0.2"):
        assert secret not in text


def capture_of(*nodes) -> dict:
    rack = shape.rack_record(load_inventory(REPO / "inventory" / "rehearsal"))
    return {"sparkrack_capture": shape.VERSION, "captured": "2026-12-05T01:00:00Z",
            "rack": rack, "nodes": list(nodes)}


def test_a_capture_round_trips_through_its_file(tmp_path):
    document = capture_of(one_node(), shape.unreachable("spark-02", 1, "connection refused"))
    write(document, tmp_path / "rack.yml")
    assert read(tmp_path / "rack.yml") == document
    assert differences(document, read(tmp_path / "rack.yml")) == []


@pytest.mark.parametrize("text, says", [
    ("nodes: [", "YAML syntax error"),
    ("nodes: []\n", "not a sparkrack capture (no sparkrack_capture key)"),
    ("sparkrack_capture: 9\nnodes: []\nrack: {}\n", "capture version 9, this sparkrack reads 1"),
])
def test_a_file_that_is_no_capture_is_one_line(tmp_path, text, says):
    (tmp_path / "x.yml").write_text(text)
    with pytest.raises(UsageError) as refused:
        read(tmp_path / "x.yml")
    assert refused.value.line().startswith(f"{tmp_path}/x.yml") and says in refused.value.line()


def test_a_capture_of_nested_aliases_is_refused_at_once(tmp_path):
    """Issue 46 item 12: a capture is read with the inventory's bounds; a 600-byte alias
    bomb took 12.4 s and 1.1 GB before."""
    from test_provision_roles import alias_bomb

    text = "sparkrack_capture: 1\nrack: {}\nnodes: []\n" + alias_bomb()
    assert len(text) < 700
    (tmp_path / "x.yml").write_text(text)
    with pytest.raises(UsageError) as refused:
        read(tmp_path / "x.yml")
    assert refused.value.line() == (
        f"{tmp_path}/x.yml:9: YAML aliases expand to over 100,000 values (write the values "
        "out; do not nest aliases of aliases)")


@pytest.mark.parametrize("edit, says", [
    (lambda c: c["nodes"].append(5), "nodes[2]: not a mapping"),
    (lambda c: c["nodes"][1].pop("rank"), "nodes[1] (spark-02): no rank"),
    (lambda c: c["nodes"][1].update(rank="1"), "nodes[1] (spark-02): rank is not an integer"),
    (lambda c: c["nodes"][1].update(name=["x"]), "nodes[1]: name ['x'] is not a node name"),
    (lambda c: c["nodes"][1].update(name="a\x1b]52;c;eA==\x07"),
     "nodes[1]: name 'a\\x1b]52;c;eA==\\x07' is not a node name"),
    (lambda c: c["nodes"][0].update(functions=["rocep1s0f0"]),
     "nodes[0] (spark-01): functions is not a mapping"),
    (lambda c: c["nodes"][0]["functions"]["rocep1s0f0"].update(gids="3 v2 ipv4"),
     "nodes[0] (spark-01): functions.rocep1s0f0.gids is not a list of text"),
    (lambda c: c["nodes"][0]["functions"]["rocep1s0f0"]["netdevs"].update(eth={"mtu": "x"}),
     "nodes[0] (spark-01): functions.rocep1s0f0.netdevs.eth.mtu is not an integer"),
    (lambda c: c["nodes"][0].update(kernel={"a": 1}), "nodes[0] (spark-01): kernel is not text"),
    (lambda c: c["rack"].update(node_vars=[1]), "rack: node_vars is not a mapping"),
])
def test_a_malformed_node_is_one_line_naming_it(tmp_path, edit, says):
    document = capture_of(one_node(), shape.unreachable("spark-02", 1, "unreachable"))
    edit(document)
    (tmp_path / "x.yml").write_text(dump(document))
    with pytest.raises(UsageError) as refused:
        read(tmp_path / "x.yml")
    line = refused.value.line()
    assert line.startswith(f"{tmp_path}/x.yml:") and says in line, line
    assert line.endswith("(give the file facts.capture wrote, or capture the rack again)")


def test_the_diff_says_what_changed_one_line_each():
    before = capture_of(one_node(), {**one_node(), "name": "spark-02", "rank": 1})
    after = copy.deepcopy(before)
    spark1, spark2 = after["nodes"]
    spark1["kernel"] = "6.17.0-1014-nvidia"
    spark1["functions"]["rocep1s0f0"]["gids"] = ["0 v1 link-local", "1 v2 link-local",
                                                 "4 v1 ipv4", "5 v2 ipv4"]
    spark2["functions"]["rocep1s0f0"]["state"] = "1: DOWN"
    spark2["cabled"] = ["roceP2p1s0f0"]
    after["nodes"].append({**one_node(), "name": "spark-09", "rank": 2})
    after["rack"]["clock_cap_mhz"] = 2100
    after["captured"] = "2026-12-06T01:00:00Z"
    assert differences(before, after) == [
        "rack: clock_cap_mhz 2200 -> 2100",
        "spark-09: new in the rack",
        "spark-01: kernel 6.17.0-1008-nvidia -> 6.17.0-1014-nvidia",
        "spark-01: functions.rocep1s0f0.gids: -2 v1 ipv4; -3 v2 ipv4; +4 v1 ipv4; +5 v2 ipv4",
        "spark-02: functions.rocep1s0f0.state 4: ACTIVE -> 1: DOWN",
        "spark-02: cabled: -rocep1s0f0"]
