"""Every error line stays short (issue 57 item 2: an unknown key's error was 905 characters,
listing every allowed key): a catalogue of mistakes in each file an operator writes (the
inventory, its pdu: section, an engine profile file, a fleet file), each refused in one
line of at most 200 characters, as read with the inventory at ./inventory/rack. Lists go to
the docs; a long default is not spelled out in a fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import shipped
from sparkrack.validate import validate

REPO = Path(__file__).resolve().parents[2]
LIMIT = 200

# (file under the inventory, text replaced, its replacement): each a mistake of its own
INVENTORY = [
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clok_cap_mhz: 2200"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", "clock_cap_mhz: 9000"),
    ("group_vars/all.yml", "clock_cap_mhz: 2200", 'clock_cap_mhz: 2200\nburn_command: ["a\\nb"]'),
    ("group_vars/all.yml", "clock_cap_mhz: 2200",
     'clock_cap_mhz: 2200\nimage_sources: {sglang: "a\\nb"}'),
    ("group_vars/all.yml", "clock_cap_mhz: 2200",
     "clock_cap_mhz: 2200\nmodel_path: /models/a:b"),
    ("group_vars/all.yml", " spark-03: 3,", " spark-03: 0,"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  address: 10.77.1.2\n  community: x"),
    ("group_vars/all.yml", "  address: 10.77.1.2",
     "  address: 10.77.1.2\n  priv_key_env: AWS_SECRET_ACCESS_KEY"),
    ("group_vars/all.yml", "  address: 10.77.1.2", "  address: 'fe80::1%eth0'"),
    ("hosts.yml", "roce_addr: 10.77.3.12,", "roce_addr: spark-02-fabric.lab,"),
    ("hosts.yml", "roce_addr: 10.77.3.12,", "roce_addr: 10.77.3.300,"),
    ("hosts.yml", "rank: 2}", "rank: 2, colour: red}"),
]
# (text of the shipped sglang.yml replaced, its replacement), in the inventory's own copy
PROFILE = [
    ("--chunked-prefill-size: 4096", "--chunked-prefil-size: 4096"),
    ('"{head_roce_addr}:{dist_init_port}"', '"{head_addr}:{dist_init_port}"'),
    ("    stop_timeout_s:", "    model_path: models/x\n    stop_timeout_s:"),
    ("health_path: /health", "health_path: health"),
]


@pytest.fixture
def rack(tmp_path) -> Path:
    """A copy of the rehearsal inventory at ./inventory/rack of tmp_path."""
    return Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "inventory" / "rack"))


def lines(inventory: Path) -> list[str]:
    """Every problem `invoke validate` names, each as the one line it prints, the paths as
    an operator at the inventory's parent folder reads them."""
    found = validate(inventory)
    assert found.problems, "no mistake found"
    here = f"{inventory.parent.parent}/"
    return [p.text().replace(here, "") for p in found.problems]


@pytest.mark.parametrize("name, old, new", INVENTORY, ids=[new.splitlines()[-1].strip()
                                                          for _, _, new in INVENTORY])
def test_an_inventory_mistake_is_one_short_line(rack, name, old, new):
    file = rack / name
    assert old in file.read_text(), f"{name} no longer holds {old!r}"
    file.write_text(file.read_text().replace(old, new, 1))
    for line in lines(rack):
        assert "\n" not in line and len(line) <= LIMIT, f"{len(line)}: {line}"


@pytest.mark.parametrize("old, new", PROFILE, ids=[new.strip() for _, new in PROFILE])
def test_a_profile_mistake_is_one_short_line(rack, old, new):
    text = (shipped("engines") / "sglang.yml").read_text()
    assert old in text, f"sglang.yml no longer holds {old!r}"
    own = rack / ".sparkrack" / "engines"
    own.mkdir(parents=True)
    (own / "sglang.yml").write_text(text.replace(old, new, 1))
    for line in lines(rack):
        assert "\n" not in line and len(line) <= LIMIT, f"{len(line)}: {line}"


def test_a_waiver_of_an_unknown_rule_names_where_the_rules_are_listed(rack):
    data = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    data["profiles"]["512k"]["waivers"] = {"KV-FITS": "measured"}
    own = rack / ".sparkrack" / "engines"
    own.mkdir(parents=True)
    (own / "sglang.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    [line] = lines(rack)
    assert "waives unknown rule 'KV-FITS' (did you mean 'KV-FIT'?)" in line
    assert line.endswith("(rules: 13 of them, see `invoke check --list`)") or \
        "see `invoke check --list`" in line
    assert len(line) <= LIMIT


def test_a_fleet_file_mistake_is_one_short_line(tmp_path):
    from sparkrack.racks.fleetfile import load_fleet

    for name in ("rack-a", "rack-b"):
        shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / name)
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("name: lab\nracks: [rack-a, rack-b]\nrouter:\n  host: 10.77.1.250\n"
                     "  policy: fastest\n")
    with pytest.raises(InventoryError) as caught:
        load_fleet(fleet)
    line = caught.value.line().replace(f"{tmp_path}/", "")
    assert line.startswith("fleet.yml:5: policy: expected one of: round_robin") and \
        line.endswith("(see docs/fleet.md#the-fleet-file)")
    assert len(line) <= LIMIT, line


def test_an_unknown_rule_asked_for_is_one_short_line():
    from sparkrack.rules import get_rule

    with pytest.raises(UsageError) as caught:
        get_rule("KV-FITS")
    assert caught.value.line() == ("unknown rule 'KV-FITS' (did you mean 'KV-FIT'?) (rules: 13 "
                                   "of them, see `invoke check --list`)")
