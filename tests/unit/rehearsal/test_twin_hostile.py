"""A capture file is input from elsewhere (a bug report, another operator): building a twin
from a hostile one writes nothing outside the twin's folder (issue 46 item 9). Every test
works on a copy of the repository's inventory tree, so a failure cannot harm the real one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from test_twin_build import rack_of

from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.twin.build import node_shapes, write_inventory
from sparkrack.rehearsal.twin.capture import dump, read

REPO = Path(__file__).resolve().parents[3]
EVIL = ["sh", "-c", "touch /tmp/pwned"]


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of inventory/ (the real rack's and the rehearsal's) in tmp_path."""
    return Path(shutil.copytree(REPO / "inventory", tmp_path / "inventory"))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (links as their target), by relative path."""
    return {str(p.relative_to(folder)): (b"link:" + str(p.readlink()).encode() if p.is_symlink()
                                         else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def from_file(capture: dict, tmp_path: Path) -> dict:
    """capture as facts.capture writes it, read back as `rehearsal.up --twin` reads it."""
    (tmp_path / "capture.yml").write_text(dump(capture))
    return read(tmp_path / "capture.yml")


def build(capture: dict, tree: Path) -> Path:
    """What `rehearsal.up --twin` does before it touches a node: shapes, then inventory."""
    node_shapes(capture)
    return write_inventory(capture, tree / "rehearsal", tree / "twin")


@pytest.mark.parametrize("key", [
    "../../rack/group_vars/all",  # the real rack's rack vars, and so its burn_command
    "../.sparkrack/roles/fabric/tasks/main",  # a role of the twin that runs as root
    "../.sparkrack/roles/fabric/templates/evil",
    "/tmp/absolute", "gb10-c", "", ".hidden",
])
def test_node_vars_of_no_node_of_the_capture_are_refused_and_nothing_is_written(
        tree, tmp_path, key):
    capture = rack_of("gb10-a", "gb10-b")
    capture["rack"]["node_vars"] = {"gb10-a": {"nccl_ib_gid_index": 5},
                                    key: {"burn_command": EVIL}}
    before = snapshot(tree)
    with pytest.raises(UsageError) as refused:
        build(from_file(capture, tmp_path), tree)
    assert refused.value.line() == (
        f"rack.node_vars: {key!r} is not a node of the capture (gb10-a, gb10-b) (give each "
        "node's own vars under its name, or capture the rack again)")
    assert snapshot(tree) == before and not (tree / "twin").exists()
    assert load_inventory(tree / "rack").vars.burn_command[0] == "docker"


@pytest.mark.parametrize("edit, says", [
    (lambda c: c["nodes"][1].update(name="../../rack/host_vars/spark-01"),
     "nodes[1].name: '../../rack/host_vars/spark-01' is not a node name"),
    (lambda c: c["nodes"][1].update(name="gb10-a"), "nodes[1].name: gb10-a is named twice"),
    (lambda c: c["rack"]["node_vars"].update({"gb10-a": {"ansible_host": "192.0.2.1"}}),
     "rack.node_vars.gb10-a: 'ansible_host' is not a var a capture holds per node"),
    (lambda c: c["rack"]["node_vars"].update({"gb10-a": ["x"]}),
     "rack.node_vars.gb10-a: not a mapping of vars"),
])
def test_a_capture_naming_other_things_than_its_nodes_is_refused(tree, tmp_path, edit, says):
    capture = rack_of("gb10-a", "gb10-b")
    edit(capture)
    before = snapshot(tree)
    with pytest.raises(UsageError) as refused:
        build(capture, tree)
    assert refused.value.line().startswith(says)
    assert snapshot(tree) == before


def test_the_capture_time_and_rack_name_stay_in_the_header_comment(tree, tmp_path):
    capture = rack_of("gb10-a", "gb10-b")
    capture["captured"] = "2026-12-05T01:00:00Z\nburn_command: [sh, -c, pwned]\n#"
    capture["rack"]["rack_name"] = "lab\u2028burn_command: x"
    out = build(from_file(capture, tmp_path), tree)
    for name in ("hosts.yml", "group_vars/all.yml"):
        text = (out / name).read_text()
        assert text.startswith("# The twin of rack lab\\u2028burn_command: x (captured "
                               "2026-12-05T01:00:00Z\\nburn_command: [sh, -c, pwned]\\n#), "
                               "written by `invoke rehearsal.up --twin`.\n")
        assert "burn_command" not in yaml.safe_load(text)
    assert list(yaml.safe_load((out / "hosts.yml").read_text())) == ["all"]


@pytest.mark.parametrize("link", ["twin", "twin/host_vars", "twin/group_vars",
                                  "twin/hosts.yml", "twin/host_vars/gb10-a.yml"])
def test_the_twin_is_never_written_through_a_link(tree, tmp_path, link):
    capture = rack_of("gb10-a", "gb10-b")
    capture["rack"]["node_vars"] = {"gb10-a": {"nccl_ib_gid_index": 5}}
    target = {"twin": "rack", "twin/host_vars": "rack/host_vars",
              "twin/group_vars": "rack/group_vars", "twin/hosts.yml": "rack/hosts.yml",
              "twin/host_vars/gb10-a.yml": "rack/host_vars/spark-01.yml"}[link]
    build(capture, tree)  # a twin built before
    shutil.rmtree(tree / link) if (tree / link).is_dir() else (tree / link).unlink()
    (tree / link).symlink_to(tree / target)
    before = snapshot(tree / "rack")
    with pytest.raises(UsageError) as refused:
        build(capture, tree)
    assert refused.value.line() == (
        f"{tree / link}: a symbolic link, which the twin's inventory is never written through "
        f"(remove it, or give --twin-inventory a folder of its own)")
    assert snapshot(tree / "rack") == before


def test_a_twin_is_never_written_over_an_inventory_that_is_no_twin(tree):
    before = snapshot(tree / "rack")
    with pytest.raises(UsageError) as refused:
        write_inventory(rack_of("gb10-a", "gb10-b"), tree / "rehearsal", tree / "rack")
    assert refused.value.line() == (
        f"{tree / 'rack'}: not a twin's inventory (no hosts.yml written by `rehearsal.up "
        "--twin`), and the twin would replace what it holds (give --twin-inventory a folder "
        "of its own, e.g. inventory/twin)")
    assert snapshot(tree / "rack") == before
