"""Hostile or broken inventory input: every text value checked by its kind at load, files
over the size limit and directories where files belong; each one line naming file:line and
the fix, exit 2 through the CLI, nothing written."""

import shutil
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest
import yaml

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import shipped
from sparkrack.engines import build_specs, load_engine
from sparkrack.inventory import MAX_FILE_BYTES, load_inventory
from sparkrack.inventory.schema import ADDRESS, SPECS
from sparkrack.inventory.values import is_address
from sparkrack.onboard import join
from sparkrack.onboard.run import onboard

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parents[1] / "data" / "inventory"


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    """A private copy of the four-node fixture inventory."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "rack"))


@pytest.fixture
def rehearsal(tmp_path: Path) -> Path:
    """A private copy of the rehearsal inventory (the engines come from the repo)."""
    return Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rehearsal"))


def add_line(inv_dir: Path, name: str, line: str) -> tuple[Path, int]:
    """Set one `key: value` line in a file of the inventory (in place of the key's own line,
    else appended); the file and that line's number."""
    file = inv_dir / name
    lines = file.read_text().splitlines()
    key = line.split(":", 1)[0] + ":"
    at = next((i for i, old in enumerate(lines) if old.startswith(key)), len(lines))
    end = at + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1  # the block under the key goes too
    lines[at:end] = [line]
    file.write_text("\n".join(lines) + "\n")
    return file, at + 1


def refused(path: Path) -> str:
    """The one line loading the inventory at path gives."""
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    line = caught.value.line()
    assert "\n" not in line and caught.value.fix
    return line


# --- Each text value by its kind --------------------------------------------------------


@pytest.mark.parametrize("line, message", [
    ('model_path: "/models/x:/etc:rw"',
     "model_path: '/models/x:/etc:rw' holds ':' or ',', which docker reads as field "
     "separators of a mount (e.g. model_path: /models/GLM-5.3-NVFP4)"),
    ("model_path: /models/../etc", "model_path: '/models/../etc' is not a plain directory"),
    ("model_path: models/x", "model_path: 'models/x' is not an absolute path"),
    ('model_path: "/models/x\\n/etc"', "holds whitespace or a control character"),
    ('images: {sglang: "lmsysorg/sglang:v1 $(reboot)", vllm: vllm/vllm-openai:v0.33.0}',
     "images: sglang: 'lmsysorg/sglang:v1 $(reboot)' is not a docker image reference"),
    ("images: {sglang: 'x:y:z', vllm: vllm/vllm-openai:v0.33.0}",
     "images: sglang: 'x:y:z' is not a docker image reference"),
    ('nccl_socket_ifname: "enp1s0f0np0\\nNCCL_DEBUG=TRACE"',
     "nccl_socket_ifname: 'enp1s0f0np0\\nNCCL_DEBUG=TRACE' is not 1-15 bytes long"),
    ('nccl_socket_ifname: "eth0\\n"', "nccl_socket_ifname: 'eth0\\n' holds whitespace or a "
     "control character"),
    ("nccl_socket_ifname: eth0,lo", "holds a character other than letters, digits"),
    ("nccl_socket_ifname: ..", "is '.' or '..', which the kernel refuses"),
    ("nccl_socket_ifname: en/p1", "holds '/' or ':', which the kernel refuses"),
    ('nccl_ib_hca: [rocep1s0f0, "roceP2p1s0f0 $(id)"]',
     "nccl_ib_hca: 'roceP2p1s0f0 $(id)' holds whitespace"),
    ("nccl_ib_hca: [rocep1s0f0, 'mlx5_0:1']", "holds '/' or ':'"),
    ("rack_name: /etc/cron.d", "rack_name: '/etc/cron.d' is not a rack name usable as a "
     "file name"),
    ("rack_name: ..", "rack_name: '..' is not a rack name"),
    ("model_name: --api-key", "model_name: '--api-key' is not a model name"),
    ('known_hosts_file: "known_hosts\\nx"', "known_hosts_file: 'known_hosts\\nx' holds a "
     "control character"),
    ('burn_command: [gpu-sim, "load\\n--x"]', "burn_command: 'load\\n--x' holds a control"),
    ('image_sources: {sglang: "/tmp/a\\u2028b.tar"}', "image_sources: sglang: "),
])
def test_rack_text_values_are_checked_by_kind(inv_dir, line, message):
    file, number = add_line(inv_dir, "group_vars/all.yml", line)
    assert refused(inv_dir).startswith(f"{file}:{number}: ")
    assert message in refused(inv_dir)


@pytest.mark.parametrize("old, new, message", [
    ("ansible_host: 192.0.2.4,", """ansible_host: "fe80::1%'$(reboot)\\"",""",
     "ansible_host: 'fe80::1%\\'$(reboot)\"' has a zone index (%...): link-local addresses are refused"),
    ("ansible_host: 192.0.2.4,", "ansible_host: 'fe80::1%eth0',",
     "ansible_host: 'fe80::1%eth0' has a zone index"),
    ("rank: 3}", """rank: 3, roce_addr: "198.51.100.9%`id`"}""",
     "roce_addr: '198.51.100.9%`id`' has a zone index"),
    ("ansible_user: ops", "ansible_user: -oProxyCommand=sh", "ansible_user: "
     "'-oProxyCommand=sh' is not a user name"),
    ("ansible_ssh_private_key_file: keys/id_ed25519", 'ansible_ssh_private_key_file: '
     '"keys/id\\x1b[2J"', "holds a control character"),
])
def test_host_text_values_are_checked_by_kind(inv_dir, old, new, message):
    file = inv_dir / "hosts.yml"
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new, 1))
    number = text[:text.index(old)].count("\n") + 1
    line = refused(inv_dir)
    assert line.startswith(f"{file}:{number}: ") and message in line, line


def test_every_text_key_has_a_kind():
    for spec in SPECS.values():
        texty = spec.type is str or spec.type == tuple[str, ...] or (
            typing.get_origin(spec.type) is not None and str in typing.get_args(spec.type)) \
            or "Mapping" in str(spec.type) or "EngineFiles" in str(spec.type)
        assert not texty or spec.kind is not None or spec.choices is not None or \
            spec.type == ADDRESS, spec.name  # a closed list of choices is checked as such


def test_the_shipped_inventories_pass_every_kind():
    for path in (REPO / "inventory" / "rack", REPO / "inventory" / "rehearsal"):
        load_inventory(path)


def test_addresses():
    for good in ("192.0.2.1", "fd00::1", "spark-01.lab", "localhost"):
        assert is_address(good)
    for bad in ("fe80::1%eth0", "::1%", "192.0.2.256", "a b", "x;reboot", "", "-x.lab"):
        assert not is_address(bad)


# --- Files: size, and a directory where a file belongs -----------------------------------


def test_a_huge_group_vars_file_is_refused_at_once(inv_dir):
    file = inv_dir / "group_vars" / "all.yml"
    with open(file, "r+b") as handle:
        handle.truncate(60 * 2**20)  # 60 MB (sparse): never read
    began = time.monotonic()
    line = refused(inv_dir)
    assert time.monotonic() - began < 3.0  # at once: the whole file was 105 s to plan
    assert line.startswith(f"{file}: 62,914,560 bytes, over the 1 MiB limit of an inventory "
                           "file (")


def test_a_file_just_under_the_limit_is_read(inv_dir):
    file = inv_dir / "group_vars" / "all.yml"
    file.write_text(file.read_text() + "#" * (MAX_FILE_BYTES - file.stat().st_size - 1) + "\n")
    assert file.stat().st_size == MAX_FILE_BYTES
    load_inventory(inv_dir)


def test_a_huge_profile_file_is_refused(rehearsal):
    (rehearsal / ".sparkrack" / "engines").mkdir(parents=True)
    file = rehearsal / ".sparkrack" / "engines" / "sglang.yml"
    file.write_bytes((shipped("engines") / "sglang.yml").read_bytes()
                     + b"#" * MAX_FILE_BYTES)
    with pytest.raises(InventoryError, match=r"sglang.yml: 1,05.* bytes, over the 1 MiB"):
        load_engine(rehearsal, "sglang")


def test_an_engine_file_that_is_a_directory_is_refused(rehearsal):
    (rehearsal / ".sparkrack" / "engines" / "sglang.yml").mkdir(parents=True)
    with pytest.raises(InventoryError) as caught:
        build_specs(load_inventory(rehearsal), "sglang", "512k")
    assert caught.value.line() == (
        f"{rehearsal}/.sparkrack/engines/sglang.yml: a directory where a profile file belongs "
        "(make "
        "sglang.yml the engine's profile file, or remove it to use the shipped one)")


def test_an_engines_folder_that_is_a_file_is_refused(rehearsal):
    (rehearsal / ".sparkrack").mkdir(exist_ok=True)
    (rehearsal / ".sparkrack" / "engines").write_text("")
    with pytest.raises(InventoryError, match="engines: a file where a directory belongs"):
        load_engine(rehearsal, "vllm")


@pytest.mark.parametrize("kind", ["engines", "models", "roles"])
def test_a_data_folder_in_the_old_place_is_refused_naming_where_it_goes(rehearsal, kind):
    from sparkrack.engines.model_data import load_model
    from sparkrack.provision.roles import load_roles, roles_path
    (rehearsal / kind).mkdir()
    with pytest.raises(InventoryError) as caught:
        {"engines": lambda: load_engine(rehearsal, "vllm"),
         "models": lambda: load_model(rehearsal, "GLM-5.3"),
         "roles": lambda: load_roles(None, roles_path(rehearsal))}[kind]()
    assert caught.value.line() == (
        f"{rehearsal}/{kind}: {kind}/ in an inventory directory is not read (Ansible would "
        f"read it as inventory) (move it to {rehearsal}/.sparkrack/{kind})")


@pytest.mark.parametrize("name, message", [
    ("group_vars/all.yml", "group_vars/all.yml: a directory where a group file belongs"),
    ("host_vars/spark-03.yml", "host_vars/spark-03.yml: a directory where a node file belongs"),
    ("hosts.yml", "hosts.yml: a directory where the hosts file belongs"),
])
def test_an_inventory_file_that_is_a_directory_is_refused(inv_dir, name, message):
    path = inv_dir / name
    if path.exists():
        path.unlink()
    path.mkdir()
    assert message in refused(inv_dir)


def test_a_model_file_that_is_a_directory_is_refused(rehearsal):
    from sparkrack.engines.model_data import load_model
    (rehearsal / ".sparkrack" / "models" / "other.yml").mkdir(parents=True)
    with pytest.raises(InventoryError, match="other.yml: a directory where a file belongs"):
        load_model(rehearsal, "GLM-5.3")


# --- Through the CLI: exit 2, one line -----------------------------------------------------


def invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize("line, message", [
    ('model_path: "/models/x:/etc:rw"', "model_path: '/models/x:/etc:rw' holds ':'"),
    ('images: {sglang: "lmsysorg/sglang:v1 $(reboot)", vllm: vllm/vllm-openai:v0.33.0}',
     "is not a docker image reference"),
    ('nccl_socket_ifname: "enp1s0f0np0\\nX=1"', "nccl_socket_ifname: 'enp1s0f0np0\\nX=1'"),
    ("rack_name: /etc/cron.d", "rack_name: '/etc/cron.d' is not a rack name"),
])
def test_plan_refuses_with_one_line_and_exit_2(rehearsal, line, message):
    file, number = add_line(rehearsal, "group_vars/all.yml", line)
    done = invoke("plan", "--engine", "sglang", "-i", str(rehearsal))
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"error: {file}:{number}: ") and message in lines[0], lines


def test_status_refuses_a_zone_index_and_a_huge_file_with_exit_2(rehearsal):
    hosts = rehearsal / "hosts.yml"
    text = hosts.read_text()
    hosts.write_text(text.replace("ansible_host: 10.77.1.14,",
                                  """ansible_host: "fe80::1%'$(reboot)\\"",""", 1))
    done = invoke("status", "-i", str(rehearsal))
    assert done.returncode == 2 and "has a zone index" in done.stderr + done.stdout
    assert len((done.stdout + done.stderr).strip().splitlines()) == 1
    hosts.write_text(text)
    with open(rehearsal / "group_vars" / "all.yml", "r+b") as handle:
        handle.truncate(60 * 2**20)
    began = time.monotonic()
    done = invoke("plan", "--engine", "sglang", "-i", str(rehearsal))
    assert done.returncode == 2 and time.monotonic() - began < 30
    assert (done.stdout + done.stderr).strip() == (
        f"error: {rehearsal}/group_vars/all.yml: 62,914,560 bytes, over the 1 MiB limit of "
        "an inventory file (is it the right file? inventory and profile files are a few KiB)")


def test_plan_refuses_an_engine_file_that_is_a_directory(rehearsal):
    (rehearsal / ".sparkrack" / "engines" / "sglang.yml").mkdir(parents=True)
    done = invoke("plan", "--engine", "sglang", "-i", str(rehearsal))
    assert done.returncode == 2
    assert (done.stdout + done.stderr).strip() == (
        f"error: {rehearsal}/.sparkrack/engines/sglang.yml: a directory where a profile file "
        "belongs "
        "(make sglang.yml the engine's profile file, or remove it to use the shipped one)")


# --- Onboarding: --address checked, hosts.yml written escaped ------------------------------


HOSTILE = """fe80::1%'$(touch /tmp/x)"\n  evil: {ansible_host: 1.2.3.4}"""


def test_onboard_refuses_a_hostile_address_before_anything(inv_dir):
    before = (inv_dir / "hosts.yml").read_text()
    inventory = load_inventory(inv_dir)
    for address, roce in ((HOSTILE, None), ("fe80::1%eth0", None), ("192.0.2.9", HOSTILE)):
        with pytest.raises(UsageError) as caught:
            onboard(inventory, "spark-09", address, roce_addr=roce, check=True)
        assert "has a zone index" in caught.value.line() and caught.value.fix
    assert (inv_dir / "hosts.yml").read_text() == before
    assert not (inv_dir / "ssh").exists()  # no known_hosts written either


@pytest.mark.parametrize("roce, twin, says", [
    ("spark-09-roce.lab", None, "--roce-addr spark-09-roce.lab is a DNS name"),
    ("2001:db8::9", None, "--roce-addr 2001:db8::9 is an IPv6 address"),
    ("198.51.100.9", "fd00::9", "--roce-twin-addr fd00::9 is an IPv6 address"),
])
def test_onboard_refuses_a_fabric_address_that_is_no_ipv4_before_anything(inv_dir, roce, twin,
                                                                          says):
    """Issue 46 item 15: what role fabric would write into netplan is refused at the flag."""
    before = (inv_dir / "hosts.yml").read_text()
    with pytest.raises(UsageError) as caught:
        onboard(load_inventory(inv_dir), "spark-09", "192.0.2.9", roce_addr=roce,
                roce_twin_addr=twin, check=True)
    assert caught.value.line().startswith(says + ", but a fabric address is IPv4")
    assert (inv_dir / "hosts.yml").read_text() == before


def test_onboard_cli_exits_2_with_one_line(inv_dir):
    before = sorted(p.name for p in inv_dir.rglob("*"))
    done = invoke("onboard", "spark-09", "--address", HOSTILE, "--check", "-i", str(inv_dir))
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "zone index" in lines[0], lines
    assert sorted(p.name for p in inv_dir.rglob("*")) == before


def test_join_writes_every_value_so_that_it_reads_back_exactly():
    text = "all:\n  children:\n    sparks:\n      hosts:\n        a: {ansible_host: 10.0.0.1}\n"
    odd = ["fd00::1", "true", "1.5", "x: y", "#x", "a'b\"c", "new\nline", "{a: b}", "", " x"]
    for value in odd:
        out = join.edit_hosts(text, "b", {"ansible_host": value, "rank": 1})
        hosts = yaml.safe_load(out)["all"]["children"]["sparks"]["hosts"]
        assert hosts["b"] == {"ansible_host": value, "rank": 1}, out
        assert set(hosts) == {"a", "b"}


def test_a_host_name_over_63_characters_is_refused_in_one_line(inv_dir):
    """Issue 53 item 3: a node's name names files (host_vars/NAME.yml) and units; a 300-
    character one was taken, and failed later as an OSError (File name too long)."""
    long = "spark-" + "9" * 294
    hosts = inv_dir / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("spark-04:", f"{long}:"))
    line = refused(inv_dir)
    assert line.startswith(f"{hosts}:9: invalid host name 'spark-{'9' * 31}...' (use at most "
                           "63 letters, digits, '.', '_' and '-', e.g. spark-01")
    assert len(line) < 300
