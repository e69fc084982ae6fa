"""The inventory's JSON Schema (`invoke validate --schema FILE`) is made from the schema table
and the ranges table, and agrees with the loader: it accepts both shipped inventories, file
by file, and refuses what the loader refuses (issue 57 item 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from sparkrack.core.errors import InventoryError
from sparkrack.inventory import load_inventory
from sparkrack.inventory.jsonschema import inventory_schema
from sparkrack.inventory.ranges import RANGES
from sparkrack.inventory.schema import SPECS

REPO = Path(__file__).resolve().parents[3]
SHIPPED = [REPO / "inventory" / "rack", REPO / "inventory" / "rehearsal"]


def validator() -> jsonschema.Draft7Validator:
    schema = inventory_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


def files(inventory: Path) -> list[Path]:
    """The YAML files an editor opens: hosts.yml, group_vars/*.yml, host_vars/*.yml."""
    return [inventory / "hosts.yml", *sorted((inventory / "group_vars").glob("*.yml")),
            *sorted((inventory / "host_vars").glob("*.yml"))]


@pytest.mark.parametrize("inventory", SHIPPED, ids=lambda p: p.name)
def test_the_schema_accepts_both_shipped_inventories(inventory):
    check = validator()
    for file in files(inventory):
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in check.iter_errors(yaml.safe_load(file.read_text()))]
        assert errors == [], file


def test_every_key_of_the_table_is_in_the_schema_with_its_meaning():
    properties = inventory_schema()["definitions"]["vars"]["properties"]
    assert set(properties) == set(SPECS)
    for name, spec in SPECS.items():
        assert properties[name]["description"].startswith(spec.meaning), name
    cap, found = properties["clock_cap_mhz"], RANGES["clock_cap_mhz"]
    assert cap["type"] == "integer" and cap["default"] == SPECS["clock_cap_mhz"].default
    assert (cap["minimum"], cap["maximum"]) == (found.low, found.high)  # the one ranges table
    assert f"Range {found.text()}: {found.source}" in cap["description"]
    timeout = properties["ssh_connect_timeout"]
    assert timeout["exclusiveMinimum"] == 0 and "minimum" not in timeout
    for name, spec in SPECS.items():
        if spec.range is not None:
            assert spec.range.source in properties[name]["description"], name
    assert properties["watchdog_action"]["enum"] == list(SPECS["watchdog_action"].choices)


# (file, text replaced, its replacement): each makes a file the loader refuses
BROKEN = [
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clock_cap_mhz: fast"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clock_cap_mhz: 9000"),
    ("group_vars/all.yml", "ssh_connect_timeout: 5", "ssh_connect_timeout: 0"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  address: 10.77.1.2\n  port: 0"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  address: 10.77.1.2\n  model: apc"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clok_cap_mhz: 2200"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clock_cap_mhz: 2200\nfabric_mtu: 100"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200",
     "clock_cap_mhz: 2200\nwatchdog_action: pause"),
    ("group_vars/all.yml", "nccl_ib_hca: [rocep1s0f0, roceP2p1s0f0]", "nccl_ib_hca: []"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200",
     "clock_cap_mhz: 2200\nimage_sources: {trtllm: /srv/trtllm.tar}"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clock_cap_mhz: 2200\nrack_name: 'a b'"),
    ("group_vars/all.yml", " spark-03: 3,", " spark-03: 0,"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  adress: 10.77.1.2"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  address: 10.77.1.2\n  user_env: HF_TOKEN"),
    ("hosts.yml", "rank: 2", "rank: -2"),
    ("hosts.yml", "rank: 2", "rank: two"),
    ("hosts.yml", "children:", "childern:"),
    ("hosts.yml", "rank: 2}", "rank: 2, clock_cap_mhz: 2000}"),  # a rack var, set per host
    ("hosts.yml", "ansible_host: 10.77.1.12", "ansible_host: 'fe80::1%eth0'"),
]


@pytest.mark.parametrize("name, old, new", BROKEN, ids=[f"{n}: {new.splitlines()[-1].strip()}"
                                                          for n, _, new in BROKEN])
def test_the_schema_refuses_what_the_loader_refuses(tmp_path, name, old, new):
    inventory = Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "inv"))
    file = inventory / name
    text = file.read_text()
    assert old in text, f"{name} no longer holds {old!r}: pick another line"
    file.write_text(text.replace(old, new, 1))
    with pytest.raises(InventoryError):
        load_inventory(inventory)
    errors = list(validator().iter_errors(yaml.safe_load(file.read_text())))
    assert errors, f"the schema accepts {new!r}, which the loader refuses"
