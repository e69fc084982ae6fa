"""A capture file is input from elsewhere (a bug report, another operator): building a twin
from a hostile one writes nothing outside the twin's folder (issue 46 item 9). Every test
works on a copy of the repository's inventory tree, so a failure cannot harm the real one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from test_twin_build import rack_of

from sparkrack.core.errors import SparkrackError, UsageError
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


@pytest.mark.parametrize("swapped, target", [("twin/host_vars", "rack/host_vars"),
                                             ("twin", "rack"),
                                             ("twin/group_vars", "rack/group_vars")])
def test_a_link_swapped_in_after_the_check_is_never_written_through(
        tree, monkeypatch, swapped, target):
    """Issue 53 item 3: the folder was checked, then written file by file, so a link put in
    place of twin/host_vars after the check led the writes (and the removal of stale
    host_vars files) into the real rack's inventory. The twin is now built in a private
    folder and renamed into place."""
    import sparkrack.rehearsal.twin.build as twin_build

    capture = rack_of("gb10-a", "gb10-b")
    capture["rack"]["node_vars"] = {"gb10-a": {"nccl_ib_gid_index": 5}}
    build(capture, tree)  # a twin built before
    checked = twin_build.check_folder

    def check_then_swap(out, names):
        checked(out, names)
        place = tree / swapped
        shutil.rmtree(place)
        place.symlink_to(tree / target)

    monkeypatch.setattr(twin_build, "check_folder", check_then_swap)
    before = snapshot(tree / "rack")
    out = build(capture, tree)
    assert snapshot(tree / "rack") == before
    assert not out.is_symlink() and not (out / "host_vars").is_symlink()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "group_vars", "group_vars/all.yml", "host_vars", "host_vars/gb10-a.yml", "hosts.yml"]
    assert yaml.safe_load((out / "host_vars" / "gb10-a.yml").read_text()) == {
        "nccl_ib_gid_index": 5}
    assert sorted(p.name for p in tree.iterdir()) == sorted(
        p.name for p in (REPO / "inventory").iterdir()) + (
        [] if (REPO / "inventory" / "twin").exists() else ["twin"])  # nothing left aside


def test_a_twin_that_fails_to_be_written_leaves_the_earlier_one_whole(tree, monkeypatch):
    import sparkrack.rehearsal.twin.build as twin_build
    from sparkrack.core.atomic import write_atomically

    capture = rack_of("gb10-a", "gb10-b")
    build(capture, tree)
    before = snapshot(tree / "twin")

    writes = []

    def full(path, data, mode=None):  # the disk fills after the first file
        if writes:
            raise OSError(28, "No space left on device")
        writes.append(path)
        write_atomically(path, data, mode)

    monkeypatch.setattr(twin_build, "write_atomically", full)
    with pytest.raises(OSError):
        build(rack_of("gb10-c", "gb10-d"), tree)
    assert snapshot(tree / "twin") == before
    assert [p.name for p in tree.iterdir() if p.name.startswith(".twin")] == []


LONG = "n" * 300


@pytest.mark.parametrize("edit, at, says", [
    (lambda text: text.replace("rank: 1\n", "rank: " + "9" * 5000 + "\n", 1), "9" * 5000,
     ":{line}: an integer of 5,000 digits, over the 4,300 Python reads (write a number of "
     "the size the key takes)"),
    (lambda text: text.replace("gb10-b", LONG), f"name: {LONG}",
     f":{{line}}: nodes[1]: name '{LONG[:76]}... is not a node name (at most 63 letters, "
     "digits, '.', '_' and '-') (give the file facts.capture wrote, or capture the rack "
     "again)"),
    (lambda text: text.replace("captured: ", "captured: 2026-13-45 #", 1), "2026-13-45",
     ":{line}: '2026-13-45' reads as a timestamp that cannot be (month must be in 1..12) "
     "(quote it to make it text, or correct it)"),
])
def test_a_hostile_capture_is_one_line_and_nothing_is_written(tree, tmp_path, edit, at, says):
    """Issue 53 item 3: a 5,000-digit integer raised Python's ValueError, and a 300-character
    node name an OSError (File name too long) once host_vars/ was already made."""
    capture = rack_of("gb10-a", "gb10-b")
    capture["rack"]["node_vars"] = {"gb10-b": {"nccl_ib_gid_index": 5}}
    text = edit(dump(capture))
    (tmp_path / "capture.yml").write_text(text)
    changed = next(i for i, line in enumerate(text.splitlines(), 1) if at in line)
    before = snapshot(tree)
    with pytest.raises(SparkrackError) as refused:
        build(read(tmp_path / "capture.yml"), tree)
    assert refused.value.line() == f"{tmp_path / 'capture.yml'}" + says.format(line=changed)
    assert snapshot(tree) == before and not (tree / "twin").exists()


def test_a_node_name_over_63_characters_is_refused_before_anything_is_written(tree):
    capture = rack_of("gb10-a", LONG)
    capture["rack"]["node_vars"] = {LONG: {"nccl_ib_gid_index": 5}}
    with pytest.raises(UsageError) as refused:
        build(capture, tree)
    assert refused.value.line().startswith(f"nodes[1].name: '{LONG[:76]}... is not a node "
                                           "name (at most 63 letters")
    assert not (tree / "twin").exists()


@pytest.mark.parametrize("edit, says", [
    (lambda text: text.replace("rank: 1\n", "rank: " + "9" * 5000 + "\n", 1),
     "an integer of 5,000 digits, over the 4,300 Python reads"),
    (lambda text: text.replace("gb10-b", LONG), "is not a node name (at most 63 letters"),
])
def test_rehearsal_up_with_a_hostile_capture_says_where_in_one_line(tree, tmp_path, edit, says):
    """The command as an operator runs it: exit 2, `error: FILE:LINE: ...`, nothing written.
    Before, the 5,000-digit integer was an unforeseen error (exit 1, naming no line) and
    the long name one after host_vars/ was made."""
    import subprocess
    import sys

    capture = rack_of("gb10-a", "gb10-b")
    capture["rack"]["node_vars"] = {"gb10-b": {"nccl_ib_gid_index": 5}}
    (tmp_path / "capture.yml").write_text(edit(dump(capture)))
    done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), "rehearsal.up",
                           "--twin", str(tmp_path / "capture.yml"), "--twin-inventory",
                           str(tree / "twin"),
                           "-i", str(tmp_path / "none")],  # were it taken, no rack could boot
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'capture.yml'}:")
    assert says in lines[0] and "Traceback" not in done.stderr
    assert not (tree / "twin").exists()
