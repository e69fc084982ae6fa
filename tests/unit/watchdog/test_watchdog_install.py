"""`invoke watch.install / uninstall / status` without a rack: what is shipped and where
(the libraries, the inventory copy with the watchdog's key and pinned known_hosts, the
unit with Restart=always), the refusal of a node whose Python differs, the plans, the
probe and status parsing, the key record, role watchdog_key's authorized_keys line; and a
whole install, re-install, status and uninstall on a loopback "node" (this machine over
the loopback sshd, systemd replaced by a fake systemctl, every path in a temp folder)."""

from __future__ import annotations

import base64
import configparser
import dataclasses
import hashlib
import json
import os
import shutil
import stat
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from invoke import Context
from invoke.exceptions import Exit
from loopback import Sshd, free_port, needs_sshd, write_inventory

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.data import shipped
from sparkrack.facts.files import FileFacts
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.systemd import UnitFacts
from sparkrack.facts.watchdog import NodeState, parse_probe
from sparkrack.inventory import load_inventory
from sparkrack.inventory import watchdog_record as keyrecord
from sparkrack.provision.changes import Put, Run
from sparkrack.provision.plan import plan_node
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roles import load_roles, node_vars, render_tasks
from sparkrack.remote import watchdog as remote_watchdog
from sparkrack.remote.watchdog import PLATFORM_SCRIPT
from sparkrack.watchdog import install as wi
from sparkrack.watchdog import payload
from sparkrack.watchdog import settings as ws_settings
from sparkrack.watchdog import status as ws
from sparkrack.watchdog import uninstall as wu
from sparkrack.watchdog.ship import plan_parts

REPO = Path(__file__).resolve().parents[3]


def _public_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


PUB, OTHER_PUB = _public_key(), _public_key()
OPERATOR = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorOperatorOperatorOperatorOperator1 op@laptop"


def rehearsal_copy(tmp_path: Path, **overrides) -> Path:
    """The rehearsal inventory in tmp_path with a known_hosts of its own (no rack needed)."""
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv,  # not an installed watchdog's record
                    ignore=shutil.ignore_patterns("watchdog.json"))
    (inv / "known_hosts").write_text("10.77.1.11 ssh-ed25519 AAAAC3Nza...host1\n")
    all_vars = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(all_vars.read_text())
    data.update({"known_hosts_file": "known_hosts", **overrides})
    all_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv


# --- What is shipped ----------------------------------------------------------------------


def test_runtime_requirements_are_pyprojects_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert tuple(payload.RUNTIME_REQUIREMENTS) == tuple(project["dependencies"])


def test_the_library_is_sparkrack_and_every_runtime_distribution():
    library = payload.build_library()
    names = {d.split()[0].lower() for d in library.distributions}
    assert {"fabric", "paramiko", "invoke", "pyyaml", "jinja2", "markupsafe", "docker",
            "requests", "urllib3", "rich", "filelock", "prometheus_client", "cryptography",
            "bcrypt", "pynacl", "cffi"} <= names
    files = library.files
    for path in ("sparkrack/watchdog/__main__.py", "sparkrack/roles/watchdog.yml",
                 "sparkrack/data/rules.yml", "sparkrack/roles/site.yml",
                 "sparkrack/roles/engine_env/templates/sglang.env.j2",
                 "sparkrack/data/engines/sglang.yml", "sparkrack/data/models/glm-5.3.yml",
                 "paramiko/__init__.py", "yaml/__init__.py",
                 "prometheus_client/__init__.py", "docker/__init__.py"):
        assert path in files, path
    assert files["sparkrack/fleet/group.py"] == REPO / "sparkrack" / "fleet" / "group.py"
    assert not any(p.startswith("roles/") for p in files)  # the roles are package data
    assert any(p.startswith("cryptography/") and p.endswith(".so") for p in files)
    assert any(p.endswith(".dist-info/METADATA") and p.startswith("paramiko") for p in files)
    assert not any("__pycache__" in p or p.endswith(".pyc") or p.startswith("..")
                   for p in files)
    manifest = library.manifest()
    assert manifest.splitlines()[0].split("  ")[1] == sorted(files)[0]
    line = next(l for l in manifest.splitlines() if l.endswith("  sparkrack/fleet/group.py"))
    assert line.split()[0] == hashlib.sha256((REPO / "sparkrack/fleet/group.py").read_bytes()).hexdigest()


def test_the_inventory_copy_reaches_every_node_with_the_watchdogs_key(tmp_path):
    inv = rehearsal_copy(tmp_path)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "spark-03.yml").write_text(
        "ansible_ssh_private_key_file: ~/.ssh/other\nnccl_ib_gid_index: 5\n")
    own = inv / ".sparkrack" / "engines" / "sglang.yml"  # an override comes along
    own.parent.mkdir(parents=True)
    own.write_bytes((shipped("engines") / "sglang.yml").read_bytes() + b"# mine\n")
    inventory = load_inventory(inv)
    copy = payload.inventory_copy(inventory, "/opt/sr")
    payload.check_inventory_copy(inventory, copy, "/opt/sr")
    assert sorted(copy) == [".sparkrack/engines/sglang.yml", "group_vars/all.yml",
                            "host_vars/spark-03.yml", "hosts.yml", "known_hosts"]
    assert copy["known_hosts"] == (inv / "known_hosts").read_bytes()  # pinned: the same keys
    assert b"ansible_ssh_private_key_file" not in copy["hosts.yml"]
    assert b"ansible_ssh_private_key_file" not in copy["host_vars/spark-03.yml"]
    assert b"nccl_ib_gid_index: 5" in copy["host_vars/spark-03.yml"]
    group = yaml.safe_load(copy["group_vars/all.yml"])
    assert group["ansible_ssh_private_key_file"] == "/opt/sr/ssh/id_ed25519"
    assert group["known_hosts_file"] == "known_hosts"
    assert group["ssh_authorized_keys_file"] == "/etc/ssh/sparkrack_authorized_keys"
    assert copy[".sparkrack/engines/sglang.yml"] == own.read_bytes()
    loaded = tmp_path / "loaded"
    for path, content in copy.items():
        (loaded / path).parent.mkdir(parents=True, exist_ok=True)
        (loaded / path).write_bytes(content)
    again = load_inventory(loaded)
    assert {n.key_file for n in again.nodes} == {Path("/opt/sr/ssh/id_ed25519")}
    assert again.known_hosts_path == loaded / "known_hosts"
    assert [(n.name, n.address, n.rank) for n in again.nodes] == [
        (n.name, n.address, n.rank) for n in inventory.nodes]
    assert again.node("spark-03").vars.nccl_ib_gid_index == 5


def test_an_inventory_without_known_hosts_is_refused(tmp_path):
    inv = rehearsal_copy(tmp_path)
    (inv / "known_hosts").unlink()
    with pytest.raises(UsageError) as refused:
        payload.inventory_copy(load_inventory(inv), "/opt/sr")
    assert "cannot read the inventory's known_hosts" in refused.value.line()


def role_plan_for(inventory, settings: ws_settings.Settings, state: NodeState | None = None,
                  facts: ProvisionFacts | None = None) -> list:
    """Role watchdog planned for the head with settings (its metrics address filled in)
    against facts (default: a node holding nothing)."""
    settings = ws_settings.with_listen(settings, inventory.head)
    roles = load_roles(play="watchdog.yml")
    renderer = Renderer()
    keys = os.environ if settings.allow_power_cycle else {}  # the PDU's, exported by conftest
    extra = wi.role_vars(inventory, settings, state or NodeState(), WANT, environ=keys)
    context = node_vars(inventory, inventory.head, roles, {}, extra)
    tasks = {r.name: render_tasks(r, r.tasks, context, renderer) for r in roles}
    handlers = {r.name: render_tasks(r, r.handlers, context, renderer) for r in roles}
    return plan_node(roles, tasks, handlers, context, facts or ProvisionFacts(),
                     renderer=renderer)


def written(changes, path: str) -> str:
    """The content a plan writes to path."""
    return next(a.content.decode() for c in changes for a in c.actions
                if isinstance(a, Put) and a.path == path)


def render_unit(inventory, settings: ws_settings.Settings) -> str:
    """The unit role watchdog writes with settings."""
    return written(role_plan_for(inventory, settings), ws_settings.with_listen(
        settings, inventory.head).unit_path)


def unit_of(tmp_path, **settings) -> tuple[configparser.ConfigParser, str]:
    inventory = load_inventory(rehearsal_copy(tmp_path))
    text = render_unit(inventory, ws_settings.Settings(**settings))
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(text)
    return unit, text


def test_the_unit_restarts_always_starts_at_boot_and_runs_the_shipped_copy(tmp_path):
    unit, text = unit_of(tmp_path, install_dir="/opt/sr", python="/usr/bin/python3.11",
                         listen="10.77.1.11")
    service = unit["Service"]
    assert service["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert unit["Unit"]["StartLimitIntervalSec"] == "0"
    assert service["ExecStart"] == (
        "/usr/bin/python3.11 -m sparkrack.watchdog --inventory /opt/sr/inventory --listen "
        "10.77.1.11:9478 --state /var/lib/sparkrack/watchdog/state.json --node spark-01")
    assert service["StandardOutput"] == service["StandardError"] == "journal"
    assert service["StateDirectory"] == "sparkrack/watchdog"
    assert "\nEnvironment=PYTHONPATH=/opt/sr/lib\n" in text
    assert "\nDocumentation=file:///opt/sr/README.md\n" in text


# --- The node's Python ------------------------------------------------------------------

HERE = payload.Platform((3, 11, 7), "x86_64", "cpython-311-x86_64-linux-gnu", ("glibc", "2.36"))


@pytest.mark.parametrize("node, says", [
    (payload.Platform((3, 11, 2), "x86_64", "cpython-311-x86_64-linux-gnu", ("glibc", "2.36")),
     None),
    (payload.Platform((3, 12, 3), "aarch64", "cpython-312-aarch64-linux-gnu", ("glibc", "2.39")),
     "Python 3.12 there, 3.11 here; aarch64 there, x86_64 here"),
    (payload.Platform((3, 11, 9), "x86_64", "cpython-311-x86_64-linux-gnu", ("glibc", "2.31")),
     "glibc 2.31 there, older than 2.36 here"),
    (payload.Platform((3, 11, 9), "x86_64", "cpython-311-x86_64-linux-musl", ("", "")),
     "extension ABI cpython-311-x86_64-linux-musl there, cpython-311-x86_64-linux-gnu here; "
     "an unknown libc there, glibc here"),
])
def test_a_node_python_that_cannot_run_these_libraries_is_named(node, says):
    problem = payload.platform_problem(HERE, node, "/usr/bin/python3")
    if says is None:
        assert problem is None
        return
    assert problem.startswith(f"the node's /usr/bin/python3 ({node.describe()}) cannot run "
                              "the libraries of this machine's Python (Python 3.11.7 x86_64")
    assert problem.endswith(says) and "\n" not in problem


SOURCES = {"10.77.1.11": "10.77.1.11", "10.77.1.12": "10.77.1.11"}  # peer: from
SETTINGS = ws_settings.Settings(install_dir="/opt/sr", listen="10.77.1.11")
LIBRARY = payload.Library({"sparkrack/__init__.py": REPO / "sparkrack/__init__.py"},
                          ("paramiko 5",))
WANT = hashlib.sha256(LIBRARY.manifest().encode()).hexdigest()


def copied(tmp_path) -> tuple:
    """The rehearsal inventory and the files watch.install copies to the node."""
    inventory = load_inventory(rehearsal_copy(tmp_path))
    return inventory, wi.role_vars(inventory, SETTINGS, NodeState())["watchdog_files"]


def state_with(files: dict, **changes) -> NodeState:
    """A node on which the watchdog is installed (files: path -> text), enabled and
    active; then changes."""
    values = dict(
        platform=HERE, sources=SOURCES, install_dir=True, install_dir_kind="marked", lib=True,
        manifest_sha256=WANT, lib_checks=True, private_key=True, public_key=PUB,
        files={p: hashlib.sha256(c.encode()).hexdigest() for p, c in files.items()},
        unit={"ActiveState": "active", "UnitFileState": "enabled"})
    values.update(changes)
    return NodeState(**values)


def file_facts(content: bytes | str, mode: str = "644") -> FileFacts:
    data = content.encode() if isinstance(content, str) else content
    return FileFacts(exists=True, type="file", mode=mode, owner="root", group="root",
                     size=len(data), sha256=hashlib.sha256(data).hexdigest(), content=data)


def installed_facts(inventory, files: dict, **unit) -> ProvisionFacts:
    """What a node with the watchdog installed answers the role's questions."""
    d = SETTINGS.install_dir
    paths = {f"{d}/{p}": file_facts(c) for p, c in files.items()}
    folders = {f"{d}/{f}": FileFacts(exists=True, type="directory", mode="755", owner="root",
                                     group="root") for f in ("inventory", "inventory/group_vars")}
    paths[SETTINGS.unit_path] = file_facts(render_unit(inventory, SETTINGS))
    paths[f"{d}/.sparkrack-runs"] = file_facts(wi.stamp(WANT, PUB, files))
    state = {"load": "loaded", "active": "active", "enabled": "enabled", **unit}
    return ProvisionFacts(files={**paths, **folders},
                          units={ws_settings.UNIT: UnitFacts(**state)})


def changed(changes) -> list[str]:
    return [f"{c.task}: {c.summary}" for c in changes if c.changed]


def test_refusal_on_a_python_mismatch_is_one_line_naming_the_difference(tmp_path):
    _, files = copied(tmp_path)
    arm = payload.Platform((3, 11, 2), "aarch64", "cpython-311-aarch64-linux-gnu", ("glibc", "2.39"))
    local = payload.Platform.local()
    why, fix = wi.refusal("spark-01", state_with(files, platform=arm), ws_settings.Settings())
    assert why.startswith("spark-01: the node's /usr/bin/python3 (Python 3.11.2 "
                          "aarch64 (cpython-311-aarch64-linux-gnu, glibc 2.39))")
    if local.machine != "aarch64":
        assert why.endswith(f"aarch64 there, {local.machine} here")
    assert fix == payload.PLATFORM_FIX
    missing, _ = wi.refusal("spark-01", state_with(
        files, platform=None, platform_error="/usr/bin/python3 did not run (exit 127): not found"),
        ws_settings.Settings())
    assert missing == ("spark-01: no usable Python at /usr/bin/python3: /usr/bin/python3 "
                       "did not run (exit 127): not found")


def test_install_on_a_fresh_node_does_everything(tmp_path):
    inventory, files = copied(tmp_path)
    fresh = NodeState(platform=HERE, sources=SOURCES)
    parts = plan_parts(fresh, WANT)
    assert parts.mark and parts.ship_lib and parts.make_key and not parts.stop
    assert parts.steps(SETTINGS, "spark-01") == [
        "mark /opt/sr as the watchdog's (.sparkrack-watchdog)",
        "ship /opt/sr/lib (sparkrack and its libraries)",
        "make the watchdog's ed25519 key /opt/sr/ssh/id_ed25519 on spark-01"]
    plan = role_plan_for(inventory, SETTINGS, fresh)
    puts = [a.path for c in plan for a in c.actions if isinstance(a, Put)]
    assert puts == [f"/opt/sr/{p}" for p in files] + [
        "/opt/sr/.sparkrack-runs", "/etc/systemd/system/sparkrack-watchdog.service"]
    assert "inventory/known_hosts" in files and "README.md" in files
    runs = [a.argv for c in plan for a in c.actions if isinstance(a, Run)]
    assert runs[:2] == [("mkdir", "-p", "-m", "0755", "--", "/opt/sr/inventory"),
                        ("mkdir", "-p", "-m", "0755", "--", "/opt/sr/inventory/group_vars")]
    assert runs[-3:] == [("systemctl", "daemon-reload"),
                         ("systemctl", "enable", "sparkrack-watchdog.service"),
                         ("systemctl", "start", "sparkrack-watchdog.service")]
    assert not any(line.startswith("restart watchdog") for line in changed(plan))  # started


def test_install_with_nothing_changed_does_nothing(tmp_path):
    inventory, files = copied(tmp_path)
    state = state_with(files)
    assert not plan_parts(state, WANT).changes_node
    plan = role_plan_for(inventory, SETTINGS, state, installed_facts(inventory, files))
    assert changed(plan) == []


@pytest.mark.parametrize("change, expect", [
    ({"lib_checks": False}, {"ship_lib": True, "stop": True}),  # a file edited there
    ({"manifest_sha256": "0" * 64}, {"ship_lib": True, "stop": True}),
    ({"manifest_sha256": "0" * 64, "unit": {"ActiveState": "inactive"}}, {"ship_lib": True}),
    ({"public_key": ""}, {"make_key": True}),
    ({"install_dir_kind": "legacy"}, {"mark": True}),  # installed before the marker
])
def test_the_watchdogs_own_parts_change_only_what_differs(tmp_path, change, expect):
    _, files = copied(tmp_path)
    parts = plan_parts(state_with(files, **change), WANT)
    got = {k: getattr(parts, k) for k in ("mark", "ship_lib", "stop", "make_key")}
    assert got == {"mark": False, "ship_lib": False, "stop": False, "make_key": False, **expect}


@pytest.mark.parametrize("unit, facts, expect", [
    ({}, {"active": "failed"}, ["the watchdog enabled at boot and running: "
                                "sparkrack-watchdog.service: start (was failed)"]),
    ({}, {"enabled": "disabled"}, ["the watchdog enabled at boot and running: "
                                   "sparkrack-watchdog.service: enable"]),
    ({"python": "/usr/bin/python3.12"}, {}, [
        "the watchdog's unit: /etc/systemd/system/sparkrack-watchdog.service: update (+1 -1)",
        "the watchdog enabled at boot and running: sparkrack-watchdog.service: daemon-reload",
        "restart watchdog: sparkrack-watchdog.service: restart"]),
])
def test_the_role_changes_only_what_differs(tmp_path, unit, facts, expect):
    inventory, files = copied(tmp_path)
    settings = dataclasses.replace(SETTINGS, **unit)
    plan = role_plan_for(inventory, settings, state_with(files),
                         installed_facts(inventory, files, **facts))
    assert changed(plan) == expect


def test_a_changed_stamp_restarts_the_watchdog_onto_what_it_runs(tmp_path):
    inventory, files = copied(tmp_path)
    state = state_with(files)
    facts = installed_facts(inventory, files)
    assert changed(role_plan_for(inventory, SETTINGS, state, facts)) == []
    rekeyed = dataclasses.replace(state, public_key=OTHER_PUB)  # a key made while it ran
    assert changed(role_plan_for(inventory, SETTINGS, rekeyed, facts)) == [
        "what the service runs, stamped (lib/'s manifest, its key, the inventory copy): "
        "/opt/sr/.sparkrack-runs: update (+1 -1)",
        "restart watchdog: sparkrack-watchdog.service: restart"]


def test_a_changed_inventory_file_is_written_and_a_stale_one_deleted(tmp_path):
    inventory, files = copied(tmp_path)
    there = dict(files)
    there["inventory/hosts.yml"] = "old\n"
    there["inventory/host_vars/spark-09.yml"] = "x: 1\n"  # a node no longer in the inventory
    state = state_with(there)
    facts = installed_facts(inventory, there)
    plan = role_plan_for(inventory, SETTINGS, state, facts)
    assert changed(plan) == [
        "the inventory copy and README the service runs with: /opt/sr/inventory/hosts.yml: "
        f"update (+{len(files['inventory/hosts.yml'].splitlines())} -1)",
        "no file left of an older inventory copy: /opt/sr/inventory/host_vars/spark-09.yml: "
        "remove",
        "what the service runs, stamped (lib/'s manifest, its key, the inventory copy): "
        "/opt/sr/.sparkrack-runs: update (+1 -2)",
        "restart watchdog: sparkrack-watchdog.service: restart"]


def test_uninstall_plan_removes_everything_there_is(tmp_path):
    _, files = copied(tmp_path)
    settings = wi.Settings(install_dir="/opt/sr")
    plan = wu.plan_uninstall("spark-01", state_with(files, state=b"{}"), settings)
    assert plan.refusal is None
    assert plan.remove_dirs == ["/opt/sr", "/var/lib/sparkrack/watchdog"]
    only_state = wu.plan_uninstall("spark-01", NodeState(state_dir=True), settings)
    assert only_state.remove_dirs == ["/var/lib/sparkrack/watchdog"]  # no state.json in it
    nothing = wu.plan_uninstall("spark-01", NodeState(platform=HERE), settings)
    assert nothing.remove_dirs == []


def test_uninstall_undoes_role_watchdog_in_absent_mode(tmp_path):
    inventory, files = copied(tmp_path)
    roles = load_roles("watchdog", play="watchdog.yml")
    renderer = Renderer()
    context = node_vars(inventory, inventory.head, roles, {},
                        ws_settings.service_vars(SETTINGS))
    tasks = {r.name: render_tasks(r, r.tasks, context, renderer) for r in roles}
    handlers = {r.name: render_tasks(r, r.handlers, context, renderer) for r in roles}
    plan = plan_node(roles, tasks, handlers, context, installed_facts(inventory, files),
                     renderer=renderer, absent=True)
    assert changed(plan) == [
        "the watchdog enabled at boot and running: sparkrack-watchdog.service: stop, disable",
        "the watchdog's unit: /etc/systemd/system/sparkrack-watchdog.service: remove",
        "what the service runs, stamped (lib/'s manifest, its key, the inventory copy): "
        "/opt/sr/.sparkrack-runs: remove",
        "daemon-reload: daemon-reload (unit files changed)"]  # and no restart of what stopped


@pytest.mark.parametrize("value", ["relative/dir", "/opt/sr/../etc", "/", "/opt/my dir",
                                   "/opt/$(reboot)"])
def test_settings_paths_must_be_plain_absolute_paths(value):
    with pytest.raises(UsageError):
        ws_settings.check_settings(ws_settings.Settings(install_dir=value))


# --- The install directory: one sparkrack made, never a system directory -------------------


@pytest.mark.parametrize("value, says", [
    ("/usr", "a top-level directory of the node"), ("/etc", "a top-level directory of the node"),
    ("/root", "a top-level directory of the node"), ("/opt", "a top-level directory of the node"),
    ("/usr/lib", "a system directory"), ("/var/lib", "a system directory"),
    ("/usr/local", "a system directory"), ("/etc/sparkrack-watchdog", "a system directory (under /etc)"),
    ("/home/op/watchdog", "a system directory (under /home)"),
    ("/boot/efi/wd", "a system directory (under /boot)"),
])
def test_a_system_directory_is_refused_as_the_install_directory(value, says):
    with pytest.raises(UsageError) as refused:
        ws_settings.check_settings(ws_settings.Settings(install_dir=value))
    assert refused.value.line() == (f"--install-dir {value}: {says} (give a directory of its "
                                    "own, absent or empty, e.g. /opt/sparkrack-watchdog)")


@pytest.mark.parametrize("value", ["/opt/sparkrack-watchdog", "/usr/local/sparkrack-watchdog",
                                   "/var/lib/sparkrack-watchdog", "/srv/watchdog"])
def test_a_directory_of_its_own_is_accepted(value):
    ws_settings.check_settings(ws_settings.Settings(install_dir=value))


def test_the_install_directory_and_the_state_directory_stay_apart():
    with pytest.raises(UsageError, match="shares its place with the state directory"):
        ws_settings.check_settings(ws_settings.Settings(install_dir="/var/lib/sparkrack"))


def test_the_node_side_tells_what_the_install_directory_is(tmp_path):
    from sparkrack.inventory import watchdog_dir as installdir
    from sparkrack.remote import watchdog as node_side

    assert node_side.MARKER == installdir.MARKER_FILE
    assert node_side.LIB_MANIFEST == payload.MANIFEST
    (tmp_path / "empty").mkdir()
    (tmp_path / "marked").mkdir()
    (tmp_path / "marked" / installdir.MARKER_FILE).write_text(installdir.MARKER_TEXT)
    (tmp_path / "legacy" / "lib").mkdir(parents=True)
    (tmp_path / "legacy" / "lib" / payload.MANIFEST).write_text("")
    (tmp_path / "foreign" / "lib").mkdir(parents=True)  # /usr: lib/ and more, no marker
    (tmp_path / "link").symlink_to(tmp_path / "marked")
    (tmp_path / "file").write_text("")
    kinds = {name: node_side.install_dir_kind(str(tmp_path / name)) for name in (
        "absent", "empty", "marked", "legacy", "foreign", "link", "file")}
    assert kinds == {name: name for name in kinds}


@pytest.mark.parametrize("kind, says", [
    ("foreign", "is a directory holding other files and no .sparkrack-watchdog"),
    ("link", "is a symbolic link"), ("file", "is not a directory")])
def test_plans_refuse_a_directory_sparkrack_did_not_make(tmp_path, kind, says):
    _, files = copied(tmp_path)
    settings = ws_settings.Settings(install_dir="/opt/sr")
    state = state_with(files, install_dir_kind=kind, state=b"{}")
    why, fix = wi.refusal("spark-01", state, settings)
    assert why == (f"spark-01: --install-dir /opt/sr {says}: not a directory "
                   "watch.install made, and nothing is written into or removed from it")
    assert fix.startswith("give a directory of its own")
    gone = wu.plan_uninstall("spark-01", state, settings)
    assert gone.refusal == why and gone.remove_dirs == []


def test_an_install_older_than_the_marker_is_marked_and_removed(tmp_path):
    _, files = copied(tmp_path)
    settings = ws_settings.Settings(install_dir="/opt/sr")
    legacy = state_with(files, install_dir_kind="legacy")
    assert wi.refusal("spark-01", legacy, settings) is None
    assert plan_parts(legacy, WANT).steps(settings, "spark-01") == [
        "mark /opt/sr as the watchdog's (.sparkrack-watchdog)"]  # and no restart for it
    assert wu.plan_uninstall("spark-01", legacy, settings).remove_dirs == ["/opt/sr"]


def test_the_remove_script_removes_only_a_marked_install_directory(tmp_path):
    import subprocess

    from sparkrack.inventory.watchdog_dir import MARKER_FILE
    from sparkrack.remote import text

    def remove(*argv: Path | str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", text("remove"), "sh", MARKER_FILE, *map(str, argv)],
                              capture_output=True, text=True, timeout=30)

    system, state = tmp_path / "usr", tmp_path / "state"
    (system / "lib").mkdir(parents=True)
    state.mkdir()
    done = remove(system, state)
    assert done.returncode == 3
    assert done.stderr == (f"{system}: no {MARKER_FILE} in it: not a directory watch.install "
                           "made; not removed\n")
    assert (system / "lib").is_dir() and state.is_dir()  # nothing removed
    (tmp_path / "link").symlink_to(system)
    (system / MARKER_FILE).write_text("")
    assert remove(tmp_path / "link", state).returncode == 3 and system.is_dir()
    ours = tmp_path / "opt" / "sparkrack-watchdog"
    (ours / "lib").mkdir(parents=True)
    (ours / MARKER_FILE).write_text("")
    assert remove(ours, state).returncode == 0
    assert not ours.exists() and not state.exists() and (system / "lib").is_dir()
    state.mkdir()
    assert remove("", state).returncode == 0 and not state.exists()


@pytest.mark.parametrize("install_dir, says", [
    ("/usr", "'/usr' is a top-level directory of the node"),
    ("/etc/ssh", "'/etc/ssh' is a system directory (under /etc)"),
    ("/opt/x/../../usr", "'/opt/x/../../usr' is not a plain absolute path")])
def test_a_recorded_install_directory_is_checked_when_the_record_is_read(tmp_path, install_dir,
                                                                        says):
    path = keyrecord.record_path(tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps({"node": "spark-01", "install_dir": install_dir,
                                "public_key": PUB, "from": ["10.77.1.11"]}))
    with pytest.raises(UsageError) as refused:
        keyrecord.read_record(tmp_path)
    assert refused.value.line().startswith(f"{path}: install_dir {says}: never the watchdog's "
                                           "directory (write there the directory")


# --- The key's from=: refused when the node cannot tell its source address -------------------


@pytest.mark.parametrize("sources, says", [
    ({}, "no answer"),
    ({"10.77.1.11": "error: [Errno 101] Network is unreachable", "10.77.1.12": "nonsense"},
     "10.77.1.11: error: [Errno 101] Network is unreachable; 10.77.1.12: nonsense")])
def test_a_node_that_cannot_tell_its_source_address_is_refused(tmp_path, sources, says):
    _, files = copied(tmp_path)
    why, fix = wi.refusal("spark-01", state_with(files, sources=sources), ws_settings.Settings())
    assert why == (f"spark-01: cannot tell the address it reaches the nodes from "
                   f"({says}): the watchdog's key would be authorized from anywhere")
    assert "ansible_host routable" in fix


# --- The metrics address: the node's management address unless --listen --------------------


def test_the_metrics_listen_on_the_nodes_address_unless_told(tmp_path):
    inventory = load_inventory(rehearsal_copy(tmp_path))
    head = inventory.head
    default = ws_settings.with_listen(ws_settings.Settings(), head)
    assert default.listen == head.address == "10.77.1.11"
    assert ws_settings.with_listen(ws_settings.Settings(listen="0.0.0.0"), head).listen == "0.0.0.0"
    unit = render_unit(inventory, default)
    assert " --listen 10.77.1.11:9478 " in unit
    assert ws_settings.listen_of(unit.encode()) == "10.77.1.11"
    assert " --listen [fd00:77::11]:9478 " in render_unit(
        inventory, ws_settings.Settings(listen="fd00:77::11"))
    assert ws_settings.metrics_url(head, inventory, "10.77.1.11") == "http://10.77.1.11:9478/metrics"
    assert ws_settings.metrics_url(head, inventory, "0.0.0.0") == "http://10.77.1.11:9478/metrics"
    assert ws_settings.metrics_url(head, inventory, "0.0.0.0", on_node=True) == (
        "http://127.0.0.1:9478/metrics")
    assert ws_settings.metrics_url(head, inventory, "fd00:77::11") == "http://[fd00:77::11]:9478/metrics"
    state = NodeState(unit_file=render_unit(inventory, ws_settings.Settings(listen="10.77.2.11")).encode())
    assert ws.status_of(head, inventory, state, None).metrics_url == (
        "http://10.77.2.11:9478/metrics")


@pytest.mark.parametrize("value", ["10.0.0.1 --x", "10.0.0.1;reboot", "fe80::1%eth0", "a_b"])
def test_a_listen_address_that_is_none_is_refused(value):
    with pytest.raises(UsageError, match=r"^--listen "):
        ws_settings.check_settings(ws_settings.Settings(listen=value))


# --- The probe and status --------------------------------------------------------------------

STATE_JSON = json.dumps({
    "budget": {"restarts": [1700000000.0]}, "stopped": {"dep1": "rank 3 exited"}, "pid": 42,
    "verdicts": [{"time": 1700000000.0, "verdict": "idle", "detail": "no engine"},
                 {"time": 1700000100.0, "verdict": "guarding", "detail": "sglang 512k"},
                 {"time": 1700000200.0, "verdict": "stopped", "detail": "rank 3 exited"}]})


PEERS = [("10.77.1.11", 22), ("10.77.1.12", 22)]


def probe_output(unit_text: str) -> str:
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    return "\n".join([
        "@@base", "093d830e-9634-4f95-b9b8-ba9aa4b10d41", "1796036605.596217102",
        "@@0 w",
        "platform " + json.dumps({"version": [3, 11, 2], "machine": "x86_64",
                                  "soabi": "cpython-311-x86_64-linux-gnu",
                                  "libc": ["glibc", "2.36"], "executable": "/usr/bin/python3"}),
        "platform-rc 0",
        "sources " + json.dumps({"10.77.1.11": "10.77.1.11", "10.77.1.12": "10.77.1.11"}),
        "exists install-dir", "exists lib", "exists state-dir",
        "manifest " + "ab" * 32, "manifest-check 0",
        "file " + "cd" * 32 + ' "inventory/hosts.yml"', "file " + "ef" * 32 + ' "README.md"',
        "private-key", "public-key " + b64(f"{PUB} sparkrack-watchdog@spark-01\n".encode()),
        "unit-file " + b64(unit_text.encode()),
        "state " + b64(STATE_JSON.encode()),
        "unit LoadState=loaded", "unit ActiveState=active", "unit SubState=running",
        "unit UnitFileState=enabled", "unit ActiveEnterTimestamp=Mon 2026-05-11 10:00:00 UTC",
        "unit NRestarts=2", "unit MainPID=4242", "unit Result=success",
        "end", ""])


def test_probe_output_is_parsed_and_status_shows_it(tmp_path):
    settings = ws_settings.Settings(install_dir="/opt/sr")
    state = parse_probe(probe_output("[Unit]\n"), ws_settings.probe_query(settings, PEERS))
    assert state.platform.version == (3, 11, 2) and state.platform.machine == "x86_64"
    assert state.sources == {"10.77.1.11": "10.77.1.11", "10.77.1.12": "10.77.1.11"}
    assert state.install_dir and state.lib and state.lib_checks and state.state_dir
    assert state.manifest_sha256 == "ab" * 32
    assert state.files == {"inventory/hosts.yml": "cd" * 32, "README.md": "ef" * 32}
    assert state.private_key and state.public_key == f"{PUB} sparkrack-watchdog@spark-01"
    assert state.unit_file == b"[Unit]\n" and state.active and state.enabled
    inventory = load_inventory(rehearsal_copy(tmp_path))
    record = keyrecord.WatchdogKey("spark-01", "/opt/sr", PUB, ("10.77.1.11",))
    found = ws.status_of(inventory.head, inventory, state, record)
    assert (found.node, found.active_state, found.sub_state, found.restarts, found.main_pid,
            found.since) == ("spark-01", "active", "running", 2, 4242,
                             "Mon 2026-05-11 10:00:00 UTC")
    assert found.metrics_url == "http://10.77.1.11:9478/metrics" and found.recorded
    assert [v["verdict"] for v in found.verdicts] == ["idle", "guarding", "stopped"]
    assert found.stopped == {"dep1": "rank 3 exited"} and found.running
    assert json.loads(json.dumps(found.as_dict()))["verdicts"][-1]["detail"] == "rank 3 exited"


def test_status_names_what_differs_from_what_install_would_ship(tmp_path):
    _, copy = copied(tmp_path)
    inventory_files = {p.removeprefix("inventory/"): c.encode() for p, c in copy.items()
                       if p.startswith("inventory/")}
    state = state_with(copy)
    assert ws.stale_parts(state, inventory_files, WANT) == ()
    files = dict(state.files)
    files["inventory/hosts.yml"] = "0" * 64
    files["inventory/host_vars/spark-09.yml"] = "1" * 64
    del files["inventory/known_hosts"]
    changed = dataclasses.replace(state_with(copy, lib_checks=False), files=files)
    assert ws.stale_parts(changed, inventory_files, WANT) == (
        "lib", "inventory/host_vars/spark-09.yml", "inventory/hosts.yml",
        "inventory/known_hosts")

    differs = state_with(copy, lib_checks=False, lib_differs=("certifi/core.py",))
    assert ws.stale_parts(differs, inventory_files, WANT) == (
        "lib/certifi/core.py",)  # the files, when what was shipped is what would be


def test_the_node_check_holds_code_to_the_manifest_and_lets_data_be_edited(tmp_path):
    lib = tmp_path / "lib"
    files = {"sparkrack/data/rules.yml": b"rules\n", "certifi/core.py": b"def where(): ...\n",
             "certifi/cacert.pem": b"-----BEGIN CERTIFICATE-----\n", "pkg/_ext.so": b"ELF",
             "pkg-1.0.dist-info/METADATA": b"Name: pkg\n"}
    for name, data in files.items():
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_bytes(data)
    manifest = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items())
    (lib / ".sparkrack-manifest").write_text(manifest)

    def lines():
        return dict(line.split(" ", 1) for line in remote_watchdog.manifest_lines(str(lib)))

    assert lines()["manifest-check"] == "0" and lines()["manifest-differs"] == "[]"
    with open(lib / "certifi/cacert.pem", "ab") as out:  # a site's agent appends its CA
        out.write(b"-----BEGIN CERTIFICATE-----\nsite CA\n")
    (lib / "pkg-1.0.dist-info/METADATA").write_bytes(b"Name: pkg\nedited\n")
    assert lines()["manifest-check"] == "0"
    assert json.loads(lines()["manifest-edited"]) == ["certifi/cacert.pem",
                                                      "pkg-1.0.dist-info/METADATA"]
    for name in ("sparkrack/data/rules.yml", "certifi/core.py", "pkg/_ext.so"):
        (lib / name).write_bytes(b"changed")
    (lib / "certifi/cacert.pem").unlink()  # a missing file is never fine
    assert lines()["manifest-check"] == "1"
    assert json.loads(lines()["manifest-differs"]) == [
        "sparkrack/data/rules.yml", "certifi/core.py", "certifi/cacert.pem", "pkg/_ext.so"]


def test_a_cut_probe_and_a_broken_state_file_are_said(tmp_path):
    settings = ws_settings.Settings()
    with pytest.raises(Exception, match="cut short"):
        parse_probe("@@base\nboot\n1.0\n@@0 w\nplatform-rc 0\n", ws_settings.probe_query(settings, PEERS))
    assert ws.parse_state(b"{not json")[3].startswith("state file unreadable")
    assert ws.parse_state(None) == ((), {}, {}, "")


# --- The key record and role watchdog_key -----------------------------------------------------


def test_the_key_record_round_trips_and_refuses_what_is_not_a_key(tmp_path):
    record = keyrecord.WatchdogKey("spark-01", "/opt/sr", PUB, ("10.77.1.11",))
    assert keyrecord.write_record(tmp_path, record)
    assert not keyrecord.write_record(tmp_path, record)  # unchanged: not rewritten
    assert keyrecord.read_record(tmp_path) == record
    assert keyrecord.node_vars(tmp_path) == {"watchdog_pubkey": PUB,
                                             "watchdog_from": ["10.77.1.11"],
                                             "watchdog_node": "spark-01"}
    assert keyrecord.check_public_key(f"{PUB} some comment") == PUB
    for bad in ("ssh-rsa AAAAB3NzaC1yc2E", f'{PUB}\ncommand="reboot" {OTHER_PUB}', ""):
        with pytest.raises(ValueError):
            keyrecord.check_public_key(bad)
    with pytest.raises(ValueError):
        keyrecord.check_sources(['10.0.0.1" ,command="x'])
    assert keyrecord.record_path(tmp_path) == tmp_path / ".sparkrack" / "watchdog.json"
    keyrecord.record_path(tmp_path).write_text('{"node": "spark-01"}')
    with pytest.raises(UsageError, match="not a watchdog key record"):
        keyrecord.read_record(tmp_path)
    assert keyrecord.remove_record(tmp_path) and not keyrecord.remove_record(tmp_path)
    assert not (tmp_path / ".sparkrack").exists()  # the inventory as it was before the record
    assert keyrecord.node_vars(tmp_path)["watchdog_pubkey"] == ""
    (tmp_path / ".sparkrack" / "engines").mkdir(parents=True)  # overrides: the folder stays
    keyrecord.record_path(tmp_path).write_text("{}")
    assert keyrecord.remove_record(tmp_path) and (tmp_path / ".sparkrack" / "engines").is_dir()


def test_a_key_record_where_ansible_reads_it_is_refused_naming_where_it_goes(tmp_path):
    (tmp_path / "watchdog.json").write_text("{}")
    with pytest.raises(UsageError) as caught:
        keyrecord.read_record(tmp_path)
    assert caught.value.line() == (
        f"{tmp_path}/watchdog.json: the watchdog's key record is not read there (Ansible "
        f"would read it as inventory) (move it to {tmp_path}/.sparkrack/watchdog.json)")


def role_plan(inv: Path, facts: ProvisionFacts, absent=False, node="spark-02"):
    inventory = load_inventory(inv)
    roles = load_roles("watchdog_key")
    renderer = Renderer()
    context = node_vars(inventory, inventory.node(node), roles, {})
    tasks = {r.name: render_tasks(r, r.tasks, context, renderer) for r in roles}
    return plan_node(roles, tasks, {}, context, facts, renderer=renderer, absent=absent)


def keys_file(text: str | None) -> ProvisionFacts:
    path = "/etc/ssh/sparkrack_authorized_keys"
    if text is None:
        return ProvisionFacts(files={path: FileFacts()})
    data = text.encode()
    return ProvisionFacts(files={path: FileFacts(exists=True, type="file", mode="600", owner="root",
                                            group="root", size=len(data),
                                            sha256=hashlib.sha256(data).hexdigest(),
                                            content=data)})


def test_role_watchdog_key_does_nothing_without_a_recorded_key(tmp_path):
    [change] = role_plan(rehearsal_copy(tmp_path), keys_file(OPERATOR + "\n"))
    assert change.status == "skipped" and not change.actions
    assert "watchdog_key" in [r.name for r in load_roles()]  # part of every provision


def test_role_watchdog_key_adds_one_marked_restricted_line(tmp_path):
    inv = rehearsal_copy(tmp_path)
    keyrecord.write_record(inv, keyrecord.WatchdogKey("spark-01", "/opt/sr", PUB,
                                                      ("10.77.1.11",)))
    [change] = role_plan(inv, keys_file(OPERATOR + "\n"))
    assert change.status == "changed"
    [put] = change.actions
    assert isinstance(put, Put) and put.path == "/etc/ssh/sparkrack_authorized_keys"
    assert put.mode == 0o600
    line = f'restrict,from="10.77.1.11" {PUB} sparkrack-watchdog'
    assert put.content.decode() == f"{OPERATOR}\n{line}\n"  # the operator's key stays
    assert f"+{line}" in change.diff
    [again] = role_plan(inv, keys_file(put.content.decode()))
    assert again.status == "ok" and not again.actions  # idempotent
    keyrecord.write_record(inv, keyrecord.WatchdogKey("spark-01", "/opt/sr", OTHER_PUB, ()))
    [rekeyed] = role_plan(inv, keys_file(put.content.decode()))
    assert rekeyed.actions[0].content.decode() == f"{OPERATOR}\nrestrict {OTHER_PUB} sparkrack-watchdog\n"


def test_role_watchdog_key_in_absent_mode_removes_the_line_whatever_the_record(tmp_path):
    inv = rehearsal_copy(tmp_path)
    text = f'{OPERATOR}\nrestrict,from="10.77.1.11" {PUB} sparkrack-watchdog\n'
    [change] = role_plan(inv, keys_file(text), absent=True)  # no record needed
    assert change.status == "changed" and change.actions[0].content.decode() == OPERATOR + "\n"
    [only] = role_plan(inv, keys_file(f"restrict {PUB} sparkrack-watchdog\n"), absent=True)
    assert only.actions == (Run(("rm", "-f", "--", "/etc/ssh/sparkrack_authorized_keys")),)
    [none] = role_plan(inv, keys_file(OPERATOR + "\n"), absent=True)
    assert none.status == "ok" and not none.actions


def test_role_watchdog_key_on_a_real_node_uses_the_users_authorized_keys(tmp_path):
    inv = tmp_path / "real"
    shutil.copytree(REPO / "inventory" / "rack", inv)
    keyrecord.write_record(inv, keyrecord.WatchdogKey("spark-01", "/opt/sr", PUB,
                                                      ("192.0.2.11",)))
    [change] = role_plan(inv, ProvisionFacts(files={".ssh/authorized_keys": FileFacts()}))
    [put] = change.actions
    assert put.path == ".ssh/authorized_keys" and put.mode == 0o600  # relative to the home
    assert put.content.decode() == f'restrict,from="192.0.2.11" {PUB} sparkrack-watchdog\n'


# --- A whole install on a loopback node --------------------------------------------------------

FAKE_SYSTEMCTL = r"""#!/bin/sh
# systemctl for a loopback "node": logs each call, keeps the unit's state in a file
here=$(dirname "$0")
echo "$*" >> "$here/systemctl.log"
[ -f "$here/unit.state" ] || printf 'active=inactive\nenabled=disabled\n' > "$here/unit.state"
. "$here/unit.state"
case "$1" in
  show) printf 'LoadState=loaded\nActiveState=%s\nSubState=%s\nUnitFileState=%s\n' \
          "$active" "$([ "$active" = active ] && echo running || echo dead)" "$enabled"
        printf 'ActiveEnterTimestamp=Mon 2026-05-11 10:00:00 UTC\nNRestarts=0\nMainPID=0\n'
        exit 0 ;;
  start|restart) active=active ;;
  stop) active=inactive ;;
  enable) enabled=enabled ;;
  disable) enabled=disabled ;;
esac
printf 'active=%s\nenabled=%s\n' "$active" "$enabled" > "$here/unit.state"
"""


def node_python() -> str:
    """The loopback node's interpreter: Debian's python3 when it can run this machine's
    libraries (a different interpreter than the tests', as on a real node), else ours."""
    debian = Path("/usr/bin/python3")
    if debian.exists():
        import subprocess

        out = subprocess.run([str(debian), "-c", PLATFORM_SCRIPT], capture_output=True,
                             text=True).stdout
        try:
            if payload.platform_problem(payload.Platform.local(), payload.Platform.parse(out),
                                        str(debian)) is None:
                return str(debian)
        except (ValueError, KeyError, IndexError):
            pass
    return sys.executable


@pytest.fixture
def loopback(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A loopback inventory of one node, spark-01 (this machine; the loopback nodes share
    one filesystem and so one authorized_keys file, which the role would write three
    times at once), its sshd's authorized_keys as ssh_authorized_keys_file, install paths
    in tmp_path and a fake systemctl."""
    monkeypatch.setenv("SPARKRACK_LOCK_DIR", str(tmp_path / "lock"))
    inv = write_inventory(sshd, tmp_path / "inv", ("spark-01",))
    with open(inv / "group_vars" / "all.yml", "a") as out:
        out.write(f"ssh_authorized_keys_file: {sshd.directory}/authorized_keys\n"
                  f"watchdog_metrics_port: {free_port()}\n")
    fake = tmp_path / "systemd" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    settings = ws_settings.Settings(install_dir=str(tmp_path / "opt" / "sparkrack-watchdog"),
                           python=node_python(), unit_dir=str(tmp_path / "systemd"),
                           state_dir=str(tmp_path / "state"), systemctl=str(fake),
                           wait_metrics=False)
    yield load_inventory(inv), settings, fake.parent
    (sshd.directory / "authorized_keys").write_text(
        "\n".join(l for l in (sshd.directory / "authorized_keys").read_text().splitlines()
                  if not l.endswith("sparkrack-watchdog")) + "\n")


def tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))
            if "__pycache__" not in p.parts}


@needs_sshd
def test_install_again_status_and_uninstall_on_a_loopback_node(loopback, sshd, capsys):
    inventory, settings, systemd = loopback
    said = []
    report = wi.install(inventory, settings=settings, say=said.append)
    d = Path(settings.install_dir)
    assert report.node == "spark-01" and report.changed
    assert report.reached == ["spark-01"]  # proved from the node, with the node's key
    key = d / "ssh" / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    public = keyrecord.check_public_key((d / "ssh" / "id_ed25519.pub").read_text())
    assert report.key.public_key == public and report.key.sources == ("127.0.0.1",)
    assert keyrecord.read_record(inventory.path) == report.key
    lines = (sshd.directory / "authorized_keys").read_text().splitlines()
    assert lines[-1] == f'restrict,from="127.0.0.1" {public} sparkrack-watchdog'
    assert len(lines) == 2  # the operator's key stays first
    copy = load_inventory(d / "inventory")
    assert {n.key_file for n in copy.nodes} == {key}
    assert (d / "inventory" / "known_hosts").read_bytes() == sshd.known_hosts.read_bytes()
    assert (d / "lib" / "sparkrack" / "watchdog" / "install.py").is_file()
    unit = (systemd / ws_settings.UNIT).read_text()
    assert f"ExecStart={settings.python} -m sparkrack.watchdog --inventory {d}/inventory" in unit
    port = inventory.vars.watchdog_metrics_port
    assert f" --listen 127.0.0.1:{port} " in unit  # spark-01's ansible_host, not 0.0.0.0
    assert "Restart=always" in unit
    from sparkrack.inventory.watchdog_dir import MARKER_FILE, MARKER_TEXT

    assert (d / MARKER_FILE).read_text() == MARKER_TEXT
    assert said.index(f"watch.install: mark {d} as the watchdog's ({MARKER_FILE})") < next(
        i for i, line in enumerate(said) if line.startswith("watch.install: shipping "))
    calls = (systemd / "systemctl.log").read_text().splitlines()
    assert [c for c in calls if not c.startswith("show")] == [  # no daemon-reload: the unit
        f"enable {ws_settings.UNIT}", f"start {ws_settings.UNIT}"]  # is outside systemd's dirs
    assert any(line.startswith("watch.install: shipping ") for line in said)

    before, calls_before = tree(d), len(calls)
    keys_before = (sshd.directory / "authorized_keys").read_bytes()
    again = wi.install(inventory, settings=settings, say=said.append)
    assert not again.changed and not again.parts.changes_node and again.role == []
    assert tree(d) == before  # not a file rewritten
    assert (sshd.directory / "authorized_keys").read_bytes() == keys_before
    calls = (systemd / "systemctl.log").read_text().splitlines()
    assert all(c.startswith("show") for c in calls[calls_before:])

    Path(settings.state_dir).mkdir()
    Path(settings.state_file).write_text(STATE_JSON)
    found = ws.status(inventory, settings=settings)
    assert found.installed and found.running and found.recorded
    assert found.public_key.startswith(public) and found.verdicts[-1]["verdict"] == "stopped"
    assert found.metrics_url == f"http://127.0.0.1:{inventory.vars.watchdog_metrics_port}/metrics"
    assert found.stale == ()

    bundle = d / "lib" / "certifi" / "cacert.pem"  # a site's agent appends its CA there
    bundle.write_bytes(bundle.read_bytes() + b"\n# site CA\n")
    edited = wi.install(inventory, settings=settings, say=said.append)
    assert not edited.changed and said[-1] == (
        "watch.install: note: spark-01 changed data files of lib/ in place "
        "(certifi/cacert.pem); kept, as no code hashes them")
    found = ws.status(inventory, settings=settings)
    assert found.stale == () and found.edited == ("lib/certifi/cacert.pem",)
    core = d / "lib" / "certifi" / "core.py"  # code edited on the node is shipped again
    core.write_bytes(core.read_bytes() + b"\n# edited\n")
    assert ws.status(inventory, settings=settings).stale == ("lib/certifi/core.py",)
    reshipped = wi.install(inventory, settings=settings, say=said.append)
    assert reshipped.parts.ship_lib and not core.read_bytes().endswith(b"# edited\n")

    with open(inventory.path / "group_vars" / "all.yml", "a") as out:  # the operator edits
        out.write("watchdog_restart_budget: 5\n")
    inventory = load_inventory(inventory.path)
    assert ws.status(inventory, settings=settings).stale == ("inventory/group_vars/all.yml",)
    calls_before = len((systemd / "systemctl.log").read_text().splitlines())
    updated = wi.install(inventory, settings=settings, say=said.append)
    assert updated.role == [f"watchdog_files: {d}/inventory/group_vars/all.yml: update (+1 -0)",
                            f"watchdog: {d}/.sparkrack-runs: update (+1 -1)",
                            f"watchdog: {ws_settings.UNIT}: restart"]
    assert f"watch.install: role watchdog: {ws_settings.UNIT}: restart" in said
    assert not updated.parts.changes_node and updated.changed
    calls = (systemd / "systemctl.log").read_text().splitlines()[calls_before:]
    assert [c for c in calls if not c.startswith("show")] == [f"restart {ws_settings.UNIT}"]
    assert "watchdog_restart_budget: 5" in (d / "inventory/group_vars/all.yml").read_text()
    assert ws.status(inventory, settings=settings).stale == ()

    run_the_shipped_service(inventory, settings, tmp_path=Path(settings.state_dir).parent)

    gone = wu.uninstall(inventory, settings=settings, say=said.append)
    assert gone.role == [f"watchdog: {ws_settings.UNIT}: stop, disable",
                         f"watchdog: {settings.unit_path}: remove",
                         f"watchdog: {d}/.sparkrack-runs: remove"]
    assert gone.deauthorized == ["spark-01"]
    assert gone.unrecorded and keyrecord.read_record(inventory.path) is None
    assert not d.exists() and not Path(settings.state_dir).exists()
    assert not (systemd / ws_settings.UNIT).exists()
    assert "sparkrack-watchdog" not in (sshd.directory / "authorized_keys").read_text()
    calls = (systemd / "systemctl.log").read_text().splitlines()
    assert [c for c in calls if not c.startswith("show")][-2:] == [  # (no daemon-reload
        f"stop {ws_settings.UNIT}", f"disable {ws_settings.UNIT}"]  # outside systemd's dirs)
    assert not ws.status(inventory, settings=settings).installed
    nothing = wu.uninstall(inventory, settings=settings, say=said.append)
    assert not nothing.changed_node and not nothing.deauthorized


def run_the_shipped_service(inventory, settings: ws_settings.Settings, tmp_path: Path) -> None:
    """The unit's ExecStart as systemd would run it (its Environment=, cwd /; the metrics
    on the loopback node's address), only with the state and lock in tmp_path (this
    machine is the loopback head: nothing may go to its /var/lib/sparkrack); install's own
    wait for /metrics must see a poll end."""
    import shlex
    import subprocess

    from sparkrack.deployments.record import RECORD_DIR
    from sparkrack.fleet import Fleet

    if Path(RECORD_DIR, "current.json").exists():
        return  # this machine has a deployment record of its own: the service would guard it
    unit = (Path(settings.unit_dir) / ws_settings.UNIT).read_text()
    argv = shlex.split(next(l for l in unit.splitlines() if l.startswith("ExecStart=")
                            ).removeprefix("ExecStart="))
    port = inventory.vars.watchdog_metrics_port
    assert argv[argv.index("--listen") + 1] == f"127.0.0.1:{port}"  # the node's address
    argv[argv.index("--state") + 1] = str(tmp_path / "service" / "state.json")
    environment = dict(line.removeprefix("Environment=").split("=", 1)
                       for line in unit.splitlines() if line.startswith("Environment="))
    environment.update(SPARKRACK_STATE_DIR=str(tmp_path / "service"),
                       SPARKRACK_LOCK_DIR=str(tmp_path / "lock"), PATH=os.environ["PATH"])
    process = subprocess.Popen(argv, cwd="/", env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        with Fleet(inventory) as fleet:
            url = wi._wait_metrics(fleet, inventory.head,
                                   ws_settings.with_listen(settings, inventory.head), inventory)
        assert url == f"http://127.0.0.1:{port}/metrics"
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=20)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in out, out
    assert "idle: no engine deployment is current" in out, out
    assert environment["PYTHONPATH"] == f"{settings.install_dir}/lib"


@needs_sshd
def test_a_node_python_that_differs_is_refused_before_anything_is_written(loopback, tmp_path):
    inventory, settings, systemd = loopback
    other = tmp_path / "python3.9"
    other.write_text('#!/bin/sh\necho \'{"version": [3, 9, 2], "machine": "aarch64", '
                     '"soabi": "cpython-39-aarch64-linux-gnu", "libc": ["glibc", "2.31"]}\'\n')
    other.chmod(0o755)
    import dataclasses

    with pytest.raises(UsageError) as refused:
        wi.install(inventory, settings=dataclasses.replace(settings, python=str(other)),
                   say=lambda line: None)
    line = refused.value.line()
    assert "\n" not in line
    assert line.startswith(f"spark-01: the node's {other} (Python 3.9.2 aarch64")
    assert "Python 3.9 there, 3.11 here; aarch64 there" in line
    assert "run watch.install from a machine whose Python matches the node's" in line
    assert not Path(settings.install_dir).exists() and not (systemd / ws_settings.UNIT).exists()
    assert keyrecord.read_record(inventory.path) is None


@needs_sshd
def test_a_directory_sparkrack_did_not_make_is_never_written_into_or_removed(loopback):
    """The review's reproduction, at a directory standing for /usr: install refuses it
    before anything is written; uninstall (the record naming it) removes nothing there."""
    from sparkrack.cli import watch_tasks

    inventory, settings, systemd = loopback
    system = Path(settings.install_dir)
    (system / "lib").mkdir(parents=True)
    (system / "lib" / "libc.so.6").write_text("the node's own\n")
    before = tree(system)
    with pytest.raises(UsageError) as refused:
        wi.install(inventory, settings=settings, say=lambda line: None)
    assert refused.value.line() == (
        f"spark-01: --install-dir {system} is a directory holding other files and no "
        ".sparkrack-watchdog: not a directory watch.install made, and nothing is written into "
        "or removed from it (give a directory of its own, absent or empty, e.g. "
        "/opt/sparkrack-watchdog)")
    assert tree(system) == before and not (systemd / ws_settings.UNIT).exists()
    assert keyrecord.read_record(inventory.path) is None
    keyrecord.write_record(inventory.path, keyrecord.WatchdogKey(
        "spark-01", settings.install_dir, PUB, ("127.0.0.1",)))
    with pytest.raises(SparkrackError) as failed:
        wu.uninstall(inventory, settings=settings, say=lambda line: None)
    assert "not a directory watch.install made" in failed.value.line()
    assert tree(system) == before and keyrecord.read_record(inventory.path) is not None
    with pytest.raises(Exit) as exited:  # the flag, through the task: before any probe
        watch_tasks.install(Context(), inventory=str(inventory.path), check=True,
                            install_dir="/usr")
    assert exited.value.code == 2
    assert exited.value.message.startswith("error: --install-dir /usr: a top-level directory")


@needs_sshd
def test_uninstall_with_the_watchdogs_node_dead_still_takes_the_key_away(sshd, tmp_path):
    inv = write_inventory(sshd, tmp_path / "inv", ("spark-01", "spark-02"),
                          ports={"spark-01": free_port()})  # nothing listens: dead
    with open(inv / "group_vars" / "all.yml", "a") as out:
        out.write(f"ssh_authorized_keys_file: {sshd.directory}/authorized_keys\n")
    inventory = load_inventory(inv)
    keyrecord.write_record(inv, keyrecord.WatchdogKey("spark-01", str(tmp_path / "opt"), PUB,
                                                      ("127.0.0.1",)))
    keys = sshd.directory / "authorized_keys"
    operator = keys.read_text()
    keys.write_text(f"{operator}restrict {PUB} sparkrack-watchdog\n")
    said = []
    try:
        with pytest.raises(SparkrackError) as failed:
            wu.uninstall(inventory, settings=ws_settings.Settings(install_dir=str(tmp_path / "opt")),
                         say=said.append)
        assert failed.value.line().startswith("watch.uninstall is not complete: spark-01: ")
        assert keys.read_text() == operator  # spark-02 (the same file here) lost the line
        assert keyrecord.read_record(inv) is not None  # kept for the run that finishes
        assert any("its files stay there" in line for line in said)
    finally:
        keys.write_text(operator)


@needs_sshd
def test_install_on_another_node_than_the_recorded_one_is_refused(loopback):
    inventory, settings, _ = loopback
    keyrecord.write_record(inventory.path, keyrecord.WatchdogKey(
        "spark-02", settings.install_dir, PUB, ("127.0.0.1",)))
    with pytest.raises(UsageError, match="the watchdog is installed on spark-02"):
        wi.install(inventory, "spark-01", settings=settings, say=lambda line: None)


@needs_sshd
def test_watch_status_task_on_a_node_without_the_watchdog(loopback, capsys):
    from sparkrack.cli import watch_tasks

    inventory, _, _ = loopback
    with pytest.raises(Exit) as raised:
        watch_tasks.status(Context(), inventory=str(inventory.path))
    assert raised.value.code == 1
    assert "the watchdog is not installed on spark-01" in capsys.readouterr().out


@needs_sshd
def test_watch_install_check_task_probes_and_changes_nothing(loopback, capsys):
    """--check through the task (no lock taken): default paths, read-only on this machine."""
    from sparkrack.cli import watch_tasks

    inventory, _, _ = loopback
    if Path(ws_settings.DEFAULT_INSTALL_DIR).exists():
        pytest.skip(f"this machine has a {ws_settings.DEFAULT_INSTALL_DIR} of its own")
    watch_tasks.install(Context(), inventory=str(inventory.path), check=True,
                        python=node_python())
    said = capsys.readouterr().err
    assert f"watch.install: would ship {ws_settings.DEFAULT_INSTALL_DIR}/lib" in said
    assert "would record the key in" in said and "from 127.0.0.1)" in said
    d = ws_settings.DEFAULT_INSTALL_DIR  # the play, planned and not applied
    assert f"watch.install: role watchdog_files would: {d}/inventory/hosts.yml: create" in said
    assert ("watch.install: role watchdog would: /etc/systemd/system/sparkrack-watchdog.service"
            ": create (0644)") in said
    assert not Path(ws_settings.DEFAULT_INSTALL_DIR).exists()
    assert keyrecord.read_record(inventory.path) is None


def test_watch_tasks_keep_invoke_watch_and_add_the_service_tasks():
    import subprocess

    for argv, words in ((["-h", "watch"], ("--duration", "--restart", "--interval", "--wait")),
                        (["-h", "watch.install"], ("--on", "--check", "--python", "--listen",
                                                   "--wait")),
                        (["-h", "watch.uninstall"], ("--on", "--check", "--wait")),
                        (["-h", "watch.status"], ("--on", "--json"))):
        done = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"[--core-opts] {argv[1]} [--options]" in done.stdout
        for word in words:
            assert word in done.stdout
    assert "--wait" not in subprocess.run(
        [sys.executable, "-m", "invoke", "-h", "watch.status"], cwd=REPO, capture_output=True,
        text=True, timeout=60).stdout
