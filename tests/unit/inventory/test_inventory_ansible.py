"""The inventories are Ansible inventories: `ansible-inventory -i DIR --list` (the real
ansible-core, a test dependency) reads each without a warning and sees the same hosts,
groups and vars as sparkrack's loader, which adds only its schema's defaults."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.data import shipped
from sparkrack.inventory import Inventory, Node, load_inventory
from sparkrack.inventory import watchdog_record as keyrecord
from sparkrack.inventory.schema import RACK_SPECS, SPECS

REPO = Path(__file__).resolve().parents[3]
INVENTORIES = [REPO / "inventory" / "rack", REPO / "inventory" / "rehearsal",
               Path(__file__).parents[1] / "data" / "inventory"]  # groups and host_vars


def ansible_inventory() -> str:
    """The ansible-inventory beside this interpreter, else on PATH."""
    found = Path(sys.executable).parent / "ansible-inventory"
    found = str(found) if found.is_file() else shutil.which("ansible-inventory")
    if found is None:  # the test extra brings ansible-core
        pytest.fail("ansible-inventory is missing: pip install -e '.[test]'")
    return found


def ansible_list(directory: Path) -> tuple[dict, str]:
    """What Ansible makes of directory: the --list JSON and its stderr. Ansible says what
    it makes of an inventory in its own [WARNING] lines; Python's warnings, which the
    libraries it imports raise (cryptography 51 deprecates DSA, which ansible-core 2.19
    imports), say nothing of the inventory and are left out."""
    done = subprocess.run([ansible_inventory(), "-i", str(directory), "--list"],
                          capture_output=True, text=True, timeout=120, cwd=directory,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1", "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def sparkrack_value(inventory: Inventory, node: Node, key: str):
    """The value sparkrack's loader gives node for an inventory key."""
    own = {"ansible_host": node.address, "ansible_port": node.port, "ansible_user": node.user,
           "ansible_ssh_private_key_file": node.key_file, "rank": node.rank,
           "roce_addr": node.roce_addr, "roce_twin_addr": node.roce_twin_addr,
           "spare": node in inventory.spares}
    return own[key] if key in own else getattr(node.vars, key)


def as_sparkrack_reads(inventory: Inventory, key: str, value):
    """An Ansible var's value checked and converted as sparkrack's loader does it."""
    value = SPECS[key].check(value)
    if key == "ansible_ssh_private_key_file":
        path = Path(value).expanduser()
        return path if path.is_absolute() else inventory.path / path
    return value


@pytest.mark.parametrize("directory", INVENTORIES, ids=lambda p: p.name)
def test_ansible_reads_the_inventory_without_a_warning(directory):
    _, stderr = ansible_list(directory)
    assert stderr.strip() == "", stderr


@pytest.mark.parametrize("directory", INVENTORIES, ids=lambda p: p.name)
def test_ansible_sees_the_hosts_groups_and_vars_sparkrack_loads(directory):
    listed, _ = ansible_list(directory)
    inventory = load_inventory(directory)
    nodes = {node.name: node for node in (*inventory.nodes, *inventory.spares)}
    hostvars = listed["_meta"]["hostvars"]
    assert sorted(hostvars) == sorted(nodes)
    groups = {name for name in listed["all"]["children"] if name != "ungrouped"}
    assert groups == set(inventory.groups)
    for group in groups:
        members = set(listed[group].get("hosts", ()))
        assert members - {s.name for s in inventory.spares} == set(inventory.groups[group])
    for name, node in nodes.items():
        seen = hostvars[name]
        for key, value in seen.items():
            assert sparkrack_value(inventory, node, key) == as_sparkrack_reads(
                inventory, key, value), (name, key)
        for spec in RACK_SPECS:  # what Ansible does not see, sparkrack takes as the default
            if spec.name not in seen:
                assert getattr(node.vars, spec.name) == spec.default, (name, spec.name)


@pytest.mark.parametrize("name", ["rack", "rehearsal"])
def test_an_inventory_in_use_stays_ansible_clean(tmp_path, name):
    """What sparkrack and an operator add to an inventory directory (overrides, the
    watchdog's key record, onboarding's known_hosts) lives where Ansible does not look."""
    directory = Path(shutil.copytree(REPO / "inventory" / name, tmp_path / name))
    own = directory / ".sparkrack"
    for kind in ("engines", "models"):
        (own / kind).mkdir(parents=True)
    shutil.copy(shipped("engines") / "sglang.yml", own / "engines")
    shutil.copy(shipped("models") / "glm-5.3.yml", own / "models")
    shutil.copytree(shipped("roles") / "nccl_env", own / "roles" / "nccl_env")
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorOperatorOperatorOperatorOperator1"
    keyrecord.write_record(directory, keyrecord.WatchdogKey("spark-01", "/opt/sr", key, ()))
    inventory = load_inventory(directory)
    if inventory.known_hosts_path.is_relative_to(directory):
        inventory.known_hosts_path.write_text(f"192.0.2.11 {key}\n")
    _, stderr = ansible_list(directory)
    assert stderr.strip() == "", stderr


def test_ansibles_own_warnings_are_still_seen(tmp_path):
    """The check above would miss nothing Ansible says: its warnings are not Python's."""
    (tmp_path / "hosts.yml").write_text("all: [\n")
    _, stderr = ansible_list(tmp_path)
    assert "[WARNING]: " in stderr and "hosts.yml" in stderr, stderr
