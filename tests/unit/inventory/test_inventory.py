"""Inventory loading, merging, selection and every validation error (exact messages)."""

import dataclasses
import shutil
from pathlib import Path

import pytest

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.inventory import load_inventory
from sparkrack.inventory.schema import RACK_SPECS, SPECS, RackVars

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parents[1] / "data" / "inventory"


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    """A private copy of the four-node fixture inventory."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "rack"))


def edit(inv_dir: Path, name: str, old: str, new: str) -> Path:
    """Replace old (which must occur) by new in one file of the inventory; return the file."""
    file = inv_dir / name
    text = file.read_text()
    assert old in text, f"{old!r} not in {name}"
    file.write_text(text.replace(old, new, 1))
    return file


def write(inv_dir: Path, name: str, text: str) -> Path:
    """Create or overwrite one file of the inventory; return it."""
    file = inv_dir / name
    file.write_text(text)
    return file


def error(path: Path) -> InventoryError:
    """The InventoryError that loading path raises."""
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    return caught.value


# --- The shipped inventories -----------------------------------------------------------


def test_real_rack_loads_with_test_net_addresses():
    inventory = load_inventory(REPO / "inventory" / "rack")
    assert [node.name for node in inventory.nodes] == [f"spark-0{i}" for i in range(1, 9)]
    assert [node.rank for node in inventory.nodes] == list(range(8))
    assert inventory.head.name == "spark-01" and inventory.head.is_head
    assert all(node.address == f"192.0.2.{11 + node.rank}" for node in inventory.nodes)
    assert all(node.roce_addr == f"198.51.100.{11 + node.rank}" for node in inventory.nodes)
    assert all(node.user == "root" and node.port == 22 for node in inventory.nodes)
    assert inventory.head.key_file == Path("~/.ssh/sparkrack").expanduser()
    assert inventory.vars.tp_size == 8 and inventory.vars.clock_cap_mhz == 2200
    assert inventory.vars.nccl_ib_hca == ("rocep1s0f0", "roceP2p1s0f0")
    assert inventory.vars.images["sglang"] == "lmsysorg/sglang:v0.5.22-cu130"
    assert inventory.known_hosts_path == REPO / "inventory" / "rack" / ".sparkrack" / "known_hosts"
    assert not inventory.is_rehearsal


def test_rehearsal_rack_loads():
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    assert [node.rank for node in inventory.nodes] == list(range(8))
    assert inventory.head.name == "spark-01"
    assert [node.address for node in inventory.nodes] == [f"10.77.1.{i}" for i in range(11, 19)]
    assert [node.roce_addr for node in inventory.nodes] == [f"10.77.3.{i}" for i in range(11, 19)]
    key = Path("/var/lib/sparkrack/rehearsal/ssh/id_ed25519")
    assert all(node.user == "root" and node.key_file == key for node in inventory.nodes)
    assert inventory.known_hosts_path == Path("/var/lib/sparkrack/rehearsal/ssh/known_hosts")
    assert inventory.is_rehearsal


def test_rehearsal_rack_shares_the_real_rack_vars():
    real = load_inventory(REPO / "inventory" / "rack").vars
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal").vars
    own = {"rack_name": "x", "known_hosts_file": "x", "ssh_authorized_keys_file": "x",
           "rehearsal": False, "rehearsal_switch_mtu": 1500, "pdu": None}
    assert dataclasses.replace(real, **own) == dataclasses.replace(rehearsal, **own)


def test_every_schema_default_is_valid():
    for spec in RACK_SPECS:
        assert spec.meaning and spec.check(spec.default) == spec.default
    assert RackVars() == RackVars(**{spec.name: spec.default for spec in RACK_SPECS})


# --- Merging ---------------------------------------------------------------------------


def test_nodes_sorted_by_rank_with_head_first(inv_dir):
    inventory = load_inventory(inv_dir)
    assert [node.name for node in inventory.nodes] == ["spark-01", "spark-03", "spark-02",
                                                       "spark-04"]
    assert inventory.head.name == "spark-01"


def test_vars_merge_in_ansibles_order(inv_dir):
    inventory = load_inventory(inv_dir)
    assert inventory.vars.clock_cap_mhz == 2100  # group_vars/all.yml
    assert inventory.vars.restart_batch_size == 1  # group_vars/sparks.yml
    assert inventory.vars.power_strip_watts == 1440  # schema default
    spark03, spark04 = inventory.node("spark-03"), inventory.node("spark-04")
    assert spark04.vars.nccl_ib_gid_index == 5 and spark04.user == "admin"  # host_vars
    assert spark03.vars.nccl_ib_gid_index == 3 and spark03.user == "ops"  # group vars
    assert inventory.vars.nccl_ib_gid_index == 3
    assert spark03.port == 2200  # host_vars/spark-03.yml beats the inline host var
    assert spark04.vars.nccl_socket_ifname == "enp1s0f1np1"


def test_roce_addr_defaults_to_ansible_host(inv_dir):
    inventory = load_inventory(inv_dir)
    assert inventory.node("spark-01").roce_addr == "198.51.100.1"
    assert inventory.node("spark-03").roce_addr == "192.0.2.3"


def test_relative_paths_resolve_against_the_inventory(inv_dir, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    inventory = load_inventory("rack")
    assert inventory.path == inv_dir
    assert inventory.known_hosts_path == inv_dir / "ssh" / "known_hosts"
    assert inventory.head.key_file == inv_dir / "keys" / "id_ed25519"


def test_host_name_is_the_address_without_ansible_host(inv_dir):
    edit(inv_dir, "hosts.yml", "ansible_host: 192.0.2.4, ", "")
    assert load_inventory(inv_dir).node("spark-04").address == "spark-04"


def test_yaml_merge_keys_apply(inv_dir):
    edit(inv_dir, "hosts.yml", "spark-04: {ansible_host: 192.0.2.4, rank: 3}",
         "spark-04: &node {ansible_host: 192.0.2.4, rank: 3, ansible_port: 2201}\n"
         "        spark-05: {<<: *node, ansible_host: 192.0.2.5, rank: 4}")
    edit(inv_dir, "group_vars/all.yml", "tp_size: 4", "tp_size: 5")
    spark05 = load_inventory(inv_dir).node("spark-05")
    assert (spark05.address, spark05.rank, spark05.port) == ("192.0.2.5", 4, 2201)


def test_nodes_are_hashable(inv_dir):
    inventory = load_inventory(inv_dir)
    assert len({node: node.name for node in inventory.nodes}) == 4
    assert hash(inventory) == hash(load_inventory(inv_dir))


# --- Choosing the inventory ------------------------------------------------------------


def test_env_var_names_the_inventory(inv_dir, monkeypatch):
    monkeypatch.setenv("SPARKRACK_INVENTORY", str(inv_dir))
    assert load_inventory().path == inv_dir
    assert load_inventory(REPO / "inventory" / "rack").path == REPO / "inventory" / "rack"  # argument wins


def test_default_is_inventory_under_the_current_directory(monkeypatch):
    monkeypatch.delenv("SPARKRACK_INVENTORY", raising=False)
    monkeypatch.chdir(REPO)
    assert load_inventory().path == REPO / "inventory" / "rack"


def test_missing_directory(tmp_path):
    assert error(tmp_path / "nope").line() == (
        f"{tmp_path}/nope: inventory directory not found (pass -i/--inventory DIR or set "
        "SPARKRACK_INVENTORY to a directory holding hosts.yml)")


def test_missing_directory_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKRACK_INVENTORY", str(tmp_path / "nope"))
    with pytest.raises(InventoryError) as caught:
        load_inventory()
    assert caught.value.message == (
        f"{tmp_path}/nope: inventory directory not found (from SPARKRACK_INVENTORY)")


def test_missing_default_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKRACK_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InventoryError) as caught:
        load_inventory()
    assert caught.value.message == (
        f"{tmp_path}/inventory/rack: inventory directory not found (the default: "
        "./inventory/rack)")


def test_missing_hosts_yml(inv_dir):
    (inv_dir / "hosts.yml").unlink()
    assert error(inv_dir).message == f"{inv_dir}: no hosts.yml in this directory"


def test_inventory_path_is_a_file(inv_dir):
    assert error(inv_dir / "hosts.yml").message == f"{inv_dir}/hosts.yml: not a directory"


# --- select and node -------------------------------------------------------------------


def test_select(inv_dir):
    inventory = load_inventory(inv_dir)
    assert inventory.select(None) == inventory.nodes
    assert [n.name for n in inventory.select("spark-04, spark-01")] == ["spark-01", "spark-04"]
    assert [n.name for n in inventory.select("spark-02,spark-02,")] == ["spark-02"]
    assert inventory.select("sparks") == inventory.select("all") == inventory.nodes


def test_select_unknown_node(inv_dir):
    with pytest.raises(UsageError) as caught:
        load_inventory(inv_dir).select("spark-01,spark-4")
    assert caught.value.line() == (
        "unknown node 'spark-4' in --limit (did you mean 'spark-04'?) "
        "(valid: spark-01, spark-03, spark-02, spark-04 (or a group: sparks, all))")


def test_select_nothing(inv_dir):
    with pytest.raises(UsageError) as caught:
        load_inventory(inv_dir).select(" , ")
    assert caught.value.message == "--limit names no node"


def test_node_unknown(inv_dir):
    with pytest.raises(UsageError) as caught:
        load_inventory(inv_dir).node("spark-9")
    assert type(caught.value) is UsageError
    assert caught.value.line() == (
        "unknown node 'spark-9' (did you mean 'spark-04'?) "
        "(known nodes: spark-01, spark-03, spark-02, spark-04)")


# --- Validation errors, exact messages -------------------------------------------------


def test_yaml_syntax_error(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", "clock_cap_mhz: 2100: x")
    assert error(inv_dir).line() == (f"{file}:4: YAML syntax error: mapping values are not "
                                  "allowed here (correct the YAML at that line)")


def test_yaml_tab_indentation(inv_dir):
    file = edit(inv_dir, "hosts.yml", "all:\n", "all:\n\tx: 1\n")
    assert error(inv_dir).message == (
        f"{file}:3: YAML syntax error: found character '\\t' that cannot start any token")


def test_unknown_key_with_suggestion(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz", "clok_cap_mhz")
    failure = error(inv_dir)
    assert failure.message == (
        f"{file}:4: unknown key 'clok_cap_mhz' (did you mean 'clock_cap_mhz'?)")
    allowed = sum(spec.scope != "host" for spec in SPECS.values())
    assert failure.fix == f"allowed keys: {allowed} of them, see docs/inventory.md#values"
    assert len(failure.line().replace(str(inv_dir), "inventory/rack")) <= 200  # it was 905


def test_unknown_key_in_host_vars(inv_dir):
    file = edit(inv_dir, "host_vars/spark-04.yml", "ansible_user: admin", "colour: red")
    assert error(inv_dir).line() == (
        f"{file}:3: unknown key 'colour' (allowed keys: 12 of them, see "
        "docs/inventory.md#values)")


def test_the_docs_name_every_key_the_errors_point_to():
    values = (REPO / "docs" / "inventory.md").read_text().split("\n## Values\n")[1]
    values = values.split("\n## ")[0]
    assert [key for key in SPECS if f"`{key}`" not in values] == []


def test_unknown_key_in_hosts_structure(inv_dir):
    file = edit(inv_dir, "hosts.yml", "children", "childern")
    assert error(inv_dir).line() == (f"{file}:3: unknown key 'childern' (did you mean "
                                  "'children'?) (allowed keys: children, vars)")


def test_rack_var_set_per_host(inv_dir):
    file = edit(inv_dir, "host_vars/spark-04.yml", "ansible_user: admin", "tp_size: 4")
    assert error(inv_dir).line() == (f"{file}:3: 'tp_size' is a rack var and cannot be set per "
                                  "host (set it in group_vars/all.yml)")


def test_host_key_set_in_group_vars(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "tp_size: 4", "rank: 0")
    assert error(inv_dir).message == (
        f"{file}:3: 'rank' belongs to one host and cannot be set in group vars")


def test_rack_var_in_one_group_of_several(inv_dir):
    edit(inv_dir, "hosts.yml", "        spark-04: {ansible_host: 192.0.2.4, rank: 3}\n",
         "    extra:\n      hosts:\n        spark-04: {ansible_host: 192.0.2.4, rank: 3}\n")
    assert error(inv_dir).message == (
        f"{inv_dir}/group_vars/sparks.yml:1: 'restart_batch_size' is a rack var and cannot be "
        "set for one group of several")


def test_duplicate_host_in_one_group(inv_dir):
    file = edit(inv_dir, "hosts.yml", "      vars:",
                "        spark-02: {ansible_host: 192.0.2.5, rank: 3}\n      vars:")
    assert error(inv_dir).line() == (
        f"{file}:10: duplicate host 'spark-02' (first at line 7) (keep one entry per node)")


def test_duplicate_host_in_two_groups(inv_dir):
    file = edit(inv_dir, "hosts.yml", "      vars:",
                "    extra:\n      hosts:\n        spark-02: {}\n      vars:")
    assert error(inv_dir).line() == (
        f"{file}:12: duplicate host 'spark-02' (also in group 'sparks' at line 7) "
        "(list each node in one group only)")


def test_duplicate_key(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "tp_size: 4", "tp_size: 4\ntp_size: 5")
    assert error(inv_dir).line() == (
        f"{file}:4: duplicate key 'tp_size' (first at line 3) (keep one of them)")


def test_wrong_type_integer(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", 'clock_cap_mhz: "fast"')
    assert error(inv_dir).line() == (f"{file}:4: clock_cap_mhz: expected an integer in "
                                  "1100..3002 MHz, got 'fast' (e.g. clock_cap_mhz: 2200)")


def test_wrong_type_rank(inv_dir):
    file = edit(inv_dir, "hosts.yml", "rank: 3}", "rank: one}")
    assert error(inv_dir).line() == (
        f"{file}:9: rank: expected an integer in 0..7, got 'one' (e.g. rank: 0)")


def test_wrong_type_list_expected(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", "nccl_ib_hca: rocep1s0f0")
    assert error(inv_dir).line() == (
        f"{file}:4: nccl_ib_hca: expected a non-empty list of names, got 'rocep1s0f0' "
        "(e.g. nccl_ib_hca: [rocep1s0f0, roceP2p1s0f0])")


def test_wrong_type_bool(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", 'rehearsal: "yes"')
    assert error(inv_dir).message == f"{file}:4: rehearsal: expected true or false, got 'yes'"


def test_number_out_of_bounds(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", "indexer_mem_fraction: 2")
    assert error(inv_dir).message == (
        f"{file}:4: indexer_mem_fraction: 2 is outside 0..1, 0 excluded: a fraction of at "
        "most 1")


def test_watchdog_vars_take_one_of_their_choices_and_a_budget(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", "watchdog_action: reboot")
    assert error(inv_dir).line() == (f"{file}:4: watchdog_action: expected one of: stop, restart, "
                                  "got 'reboot' (e.g. watchdog_action: stop)")
    edit(inv_dir, "group_vars/all.yml", "watchdog_action: reboot",
         "watchdog_action: restart\nwatchdog_restart_budget: -1")
    assert error(inv_dir).message == (
        f"{file}:5: watchdog_restart_budget: -1 is outside 0..10 restarts: a count of "
        "restarts (0: never restart)")
    edit(inv_dir, "group_vars/all.yml", "watchdog_restart_budget: -1",
         "watchdog_restart_budget: 2\nwatchdog_restart_window_minutes: 10")
    loaded = load_inventory(inv_dir).vars
    assert (loaded.watchdog_action, loaded.watchdog_restart_budget,
            loaded.watchdog_restart_window_minutes) == ("restart", 2, 10.0)


def test_unknown_engine_image(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "clock_cap_mhz: 2100", "images: {sglng: x}")
    assert error(inv_dir).message == (f"{file}:4: images: expected a mapping of engine "
                                   "(sglang, vllm) to image ref, got {sglng: x}")


def test_structure_wrong_type(inv_dir):
    file = edit(inv_dir, "hosts.yml", "    sparks:\n", "    sparks:\n      hosts: 5\n    x:\n")
    assert error(inv_dir).message == f"{file}:5: hosts: expected a mapping, got 5"


def test_missing_head(inv_dir):
    file = edit(inv_dir, "hosts.yml", "rank: 0,", "rank: 4,")
    assert error(inv_dir).line() == (
        f"{file}:5: no node has rank 0 (the head) (give the head node rank: 0)")


def test_duplicate_rank(inv_dir):
    file = edit(inv_dir, "hosts.yml", "rank: 2,", "rank: 1,")
    assert error(inv_dir).line() == (
        f"{file}:8: duplicate rank 1: spark-02 (hosts.yml:7) and spark-03 (hosts.yml:8) "
        "(give each node its own rank 0..3)")


def test_duplicate_rank_across_files(inv_dir):
    file = write(inv_dir, "host_vars/spark-04.yml", "# head?\nrank: 0\n")
    edit(inv_dir, "hosts.yml", "rank: 3}", "}")
    assert error(inv_dir).message == (
        f"{file}:2: duplicate rank 0: spark-01 (hosts.yml:6) and spark-04 "
        "(host_vars/spark-04.yml:2)")


def test_missing_rank(inv_dir):
    file = edit(inv_dir, "hosts.yml", ", rank: 3}", "}")
    assert error(inv_dir).line() == (f"{file}:9: host 'spark-04' has no rank "
                                  "(add rank: N with N in 0..3, 0 for the head)")


def test_rank_out_of_range(inv_dir):
    file = edit(inv_dir, "hosts.yml", "rank: 3}", "rank: 4}")
    assert error(inv_dir).line() == (
        f"{file}:9: rank 4 of spark-04 is out of range 0..3 (number the 4 nodes 0..3)")


def test_negative_rank(inv_dir):
    file = edit(inv_dir, "hosts.yml", "rank: 3}", "rank: -1}")
    assert error(inv_dir).message == (
        f"{file}:9: rank: -1 is outside 0..7: ranks count from 0")


def test_tp_size_not_node_count(inv_dir):
    file = edit(inv_dir, "group_vars/all.yml", "tp_size: 4", "tp_size: 8")
    assert error(inv_dir).line() == (
        f"{file}:3: tp_size is 8 but the inventory has 4 nodes "
        "(set tp_size: 4 in group_vars/all.yml, or list 8 nodes)")


def test_default_tp_size_not_node_count(inv_dir):
    edit(inv_dir, "group_vars/all.yml", "tp_size: 4\n", "")
    assert error(inv_dir).message == (
        f"{inv_dir}/hosts.yml:5: tp_size is 8 but the inventory has 4 nodes")


def test_duplicate_address(inv_dir):
    file = edit(inv_dir, "hosts.yml", "192.0.2.2,", "192.0.2.1,")
    assert error(inv_dir).line() == (
        f"{file}:7: duplicate ansible_host 192.0.2.1: spark-01 (hosts.yml:6) and spark-02 "
        "(hosts.yml:7) (give each node its own ansible_host)")


def test_shared_address_on_other_port_needs_own_roce_addr(inv_dir):
    file = edit(inv_dir, "hosts.yml", "192.0.2.4,", "192.0.2.3,")
    assert error(inv_dir).message == (
        f"{file}:9: duplicate roce_addr 192.0.2.3: spark-03 (hosts.yml:8) and spark-04 "
        "(hosts.yml:9)")


def test_host_vars_for_unknown_host(inv_dir):
    file = write(inv_dir, "host_vars/spark-4.yml", "ansible_port: 22\n")
    assert error(inv_dir).line() == (
        f"{file}: host_vars file for node 'spark-4', which is not in hosts.yml (did you mean "
        "'spark-04'?) (rename it after one of: spark-01, spark-02, spark-03, spark-04; "
        "or delete it)")


def test_group_vars_for_unknown_group(inv_dir):
    file = write(inv_dir, "group_vars/sprks.yml", "ansible_port: 22\n")
    assert error(inv_dir).message == (f"{file}: group_vars file for group 'sprks', which is not "
                                   "in hosts.yml (did you mean 'sparks'?)")


def test_stray_file_in_host_vars(inv_dir):
    file = write(inv_dir, "host_vars/spark-01.yaml", "ansible_port: 22\n")
    assert error(inv_dir).line() == (f"{file}: unexpected entry in host_vars/ "
                                  "(host_vars/ holds one <node>.yml file per node)")


def test_invalid_address(inv_dir):
    file = edit(inv_dir, "hosts.yml", "192.0.2.4,", "spark 04,")
    assert error(inv_dir).line() == (
        f"{file}:9: ansible_host: expected an IP address or hostname, got 'spark 04' "
        "(e.g. ansible_host: 192.0.2.11)")


def test_invalid_roce_addr(inv_dir):
    file = edit(inv_dir, "hosts.yml", "198.51.100.2}", "198.51.100.300}")
    assert error(inv_dir).message == (
        f"{file}:7: roce_addr: expected an IPv4 address, got '198.51.100.300'")


def test_host_name_is_no_address(inv_dir):
    file = edit(inv_dir, "hosts.yml", "spark-04: {ansible_host: 192.0.2.4, rank: 3}",
                "spark_04: {rank: 3}")
    (inv_dir / "host_vars" / "spark-04.yml").unlink()
    assert error(inv_dir).line() == (f"{file}:9: host name 'spark_04' is not an address to "
                                  "connect to (set ansible_host: ADDRESS for it)")


def test_invalid_host_name(inv_dir):
    file = edit(inv_dir, "hosts.yml", "spark-04:", "spark 04:")
    assert error(inv_dir).message == f"{file}:9: invalid host name 'spark 04'"


def test_no_hosts(inv_dir):
    file = write(inv_dir, "hosts.yml", "# nothing yet\n")
    assert error(inv_dir).message == f"{file}: no hosts defined"


@pytest.mark.parametrize("name, text", [
    ("hosts.yml", "[a, b]\n"),
    ("hosts.yml", "all: [a]\n"),
    ("hosts.yml", "all: {children: {sparks: {hosts: [a]}}}\n"),
    ("hosts.yml", "all: {children: {sparks: {hosts: {null: {rank: 0}}}}}\n"),
    ("hosts.yml", "all: {children: {sparks: {hosts: {a: [1]}}}}\n"),
    ("hosts.yml", "all: {children: {sparks: {hosts: {a: {rank: 0}}, vars: 3}}}\n"),
    ("hosts.yml", "all: {children: {all: {hosts: {a: {rank: 0}}}}}\n"),
    ("hosts.yml", "? [a]\n: 1\n"),
    ("hosts.yml", "a: &x [*x]\n"),
    ("hosts.yml", "a: !!set {x}\n"),
    ("hosts.yml", "all: !custom 1\n"),
    ("hosts.yml", "\x07\n"),
    ("hosts.yml", "[" * 2000),
    ("group_vars/all.yml", "tp_size: 4\n---\ntp_size: 4\n"),
    ("group_vars/all.yml", "images: [sglang]\n"),
    ("group_vars/all.yml", "images: {sglang: ''}\n"),
    ("group_vars/all.yml", "model_path: 5.3\n"),
    ("group_vars/all.yml", "known_hosts_file: 2024-01-01\n"),
    ("group_vars/all.yml", "ssh_connect_timeout: 1e-2\n"),
    ("host_vars/spark-01.yml", "ansible_port: 70000\n"),
    ("host_vars/spark-01.yml", "- nccl_ib_gid_index: 5\n"),
])
def test_bad_input_is_always_an_inventory_error(inv_dir, name, text):
    write(inv_dir, name, text)
    assert isinstance(error(inv_dir), InventoryError)


def test_unreadable_bytes(inv_dir):
    (inv_dir / "group_vars" / "all.yml").write_bytes(b"tp_size: \xff\n")
    assert error(inv_dir).message == f"{inv_dir}/group_vars/all.yml: not UTF-8 text"


FABRIC_FIX = {"roce_addr": "e.g. roce_addr: 198.51.100.11, or leave it out",
              "roce_twin_addr": "e.g. roce_twin_addr: 198.51.101.11, or leave it out"}


@pytest.mark.parametrize("old, new, line, key, says", [
    ("roce_addr: 198.51.100.2}", "roce_addr: spark-02-roce.lab}", 7, "roce_addr",
     "spark-02: roce_addr spark-02-roce.lab is a DNS name"),
    ("roce_addr: 198.51.100.2}", "roce_addr: '2001:db8::2'}", 7, "roce_addr",
     "spark-02: roce_addr 2001:db8::2 is an IPv6 address"),
    ("spark-04: {ansible_host: 192.0.2.4, rank: 3}",
     "spark-04: {ansible_host: 192.0.2.4, rank: 3, roce_twin_addr: 'fd00::4'}", 9,
     "roce_twin_addr", "spark-04: roce_twin_addr fd00::4 is an IPv6 address"),
])
def test_a_fabric_address_that_is_no_ipv4_address_is_refused(inv_dir, old, new, line, key,
                                                              says):
    """Issue 46 item 15: role fabric rendered a DNS name or an IPv6 address into netplan
    (its in-force check then failed on IPv6); the inventory is refused before anything."""
    path = edit(inv_dir, "hosts.yml", old, new)
    assert error(inv_dir).line() == (
        f"{path}:{line}: {says}, but a fabric address is IPv4 (docs/inventory.md#values) "
        f"({FABRIC_FIX[key]})")


def test_a_fabric_address_in_host_vars_is_refused_there(inv_dir):
    path = write(inv_dir, "host_vars/spark-04.yml", "nccl_ib_gid_index: 5\nroce_addr: r4.lab\n")
    assert error(inv_dir).line().startswith(f"{path}:2: spark-04: roce_addr r4.lab is a DNS name")


def test_roce_addr_may_name_the_management_address_whatever_it_is(inv_dir):
    """roce_addr equal to ansible_host is the management address (no fabric address is
    written), as when it is left out: a DNS name or IPv6 there is no fabric address."""
    edit(inv_dir, "hosts.yml", "spark-04: {ansible_host: 192.0.2.4, rank: 3}",
         "spark-04: {ansible_host: 'spark-04.lab', roce_addr: spark-04.lab, rank: 3}")
    assert load_inventory(inv_dir).node("spark-04").roce_addr == "spark-04.lab"
