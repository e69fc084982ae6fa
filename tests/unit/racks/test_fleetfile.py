"""The fleet file: its schema in one place, every mistake one line at file:line."""

from pathlib import Path

import pytest

from sparkrack.core.errors import InventoryError
from sparkrack.racks.fleetfile import SMG_VERSION, load_fleet


def rack(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "hosts.yml").write_text("all: {}\n")
    return name


def write(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "fleet.yml"
    file.write_text(text)
    return file


def test_a_fleet_file_with_two_racks_and_the_router_defaults(tmp_path):
    one, two = rack(tmp_path, "rack-a"), rack(tmp_path, "rack-b")
    fleet = load_fleet(write(tmp_path, f"name: lab\nracks: [{one}, {two}]\n"
                                       "router:\n  host: 10.77.1.250\n"))
    assert fleet.racks == (tmp_path / "rack-a", tmp_path / "rack-b")
    router = fleet.router
    assert (router.host, router.port, router.metrics_port, router.policy, router.version,
            router.connect_timeout_s) == ("10.77.1.250", 30080, 29000, "round_robin",
                                          SMG_VERSION, 2)
    assert router.url == "http://10.77.1.250:30080"
    assert (fleet.drain_budget_s, fleet.soak_s, fleet.max_error_rate) == (120, 30, 0.0)


@pytest.mark.parametrize("text, line, message", [
    ("name: lab\nracks: [rack-a]\nrouter: {host: 10.77.1.250}\n", 2,
     "racks: expected a list of two or more inventory folders"),
    ("name: lab\nracks: [rack-a, nowhere]\nrouter: {host: 10.77.1.250}\n", 2,
     "is not an inventory folder (no hosts.yml)"),
    ("name: lab\nracks: [rack-a, rack-a]\nrouter: {host: 10.77.1.250}\n", 2,
     "is named twice"),
    ("name: lab\nracks: [rack-a, rack-b]\nrouter:\n  host: 10.77.1.250\n  policy: fastest\n",
     5, "policy: expected one of: round_robin"),
    ("name: lab\nracks: [rack-a, rack-b]\nrouter:\n  host: 10.77.1.250\n  metrics_port: 30080\n",
     5, "metrics_port 30080 is the router's port too"),
    ("name: lab\nracks: [rack-a, rack-b]\nrouter:\n  host: 10.77.1.250\n  connect_timeout_s: 30\n",
     5, "connect_timeout_s: expected whole seconds, 1-10 (SMG's own default 10)"),
    ("name: lab\nracks: [rack-a, rack-b]\nrouter: {host: 10.77.1.250}\ndrain_budget_s: 7200\n",
     4, "drain_budget_s: expected whole seconds, 0-1800"),
    ("name: lab\nracks: [rack-a, rack-b]\nrouter: {host: 10.77.1.250}\nsoak: 3\n", 4,
     "unknown key 'soak'"),
])
def test_a_mistake_is_one_line_at_its_line(tmp_path, text, line, message):
    rack(tmp_path, "rack-a")
    rack(tmp_path, "rack-b")
    file = write(tmp_path, text)
    with pytest.raises(InventoryError) as caught:
        load_fleet(file)
    assert f"{file}:{line}" in caught.value.line() and message in caught.value.line(), \
        caught.value.line()
