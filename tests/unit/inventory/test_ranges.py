"""Issue 53 item 1: every number an operator sets has a range with its source (ranges.py);
a value outside is refused at load in one line naming file:line, the range and why (exit 2
through `invoke check`), a legal but unusual one is one line of warning."""

import re
import shutil
from pathlib import Path

import pytest
from invoke import Collection, Program

from sparkrack.cli import check_tasks
from sparkrack.core.errors import InventoryError
from sparkrack.inventory import load_inventory
from sparkrack.inventory.ranges import RANGES, number
from sparkrack.inventory.schema import (
    CONNECTION,
    HOST,
    HOST_SPECS,
    RACK_SPECS,
    SPECS,
    RackVars,
)

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parents[1] / "data" / "inventory"
OTHER_KEYS = {"pdu.port", "pdu.outlets", "profile.ready_timeout_s", "profile.stop_timeout_s",
              "profile.stall_budget_s", "profile.ports", "serving.memory_fraction.default"}


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "rack"))


@pytest.fixture
def rack_dir(tmp_path: Path) -> Path:
    """A copy of the shipped real-rack inventory (eight nodes, clock_cap_mhz at line 8)."""
    return Path(shutil.copytree(REPO / "inventory" / "rack", tmp_path / "rack"))


def set_var(directory: Path, line: str) -> tuple[Path, int]:
    """Set one var in group_vars/all.yml (replacing its line, else appended); (the file,
    that line's number)."""
    file = directory / "group_vars" / "all.yml"
    key = line.split(":", 1)[0] + ":"
    lines = file.read_text().splitlines()
    at = next((i for i, old in enumerate(lines) if old.startswith(key)), len(lines))
    lines[at:at + 1] = [line]
    file.write_text("\n".join(lines) + "\n")
    return file, at + 1


def error(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    return caught.value


def run_check(*args: str) -> int:
    """`invoke check ARGS` in this process, as an operator runs it; the exit code."""
    try:
        Program(namespace=Collection.from_module(check_tasks)).run(["invoke", "check", *args])
    except SystemExit as stop:
        return stop.code
    return 0


# --- the table -------------------------------------------------------------------------


def test_every_number_of_the_schema_has_a_range_and_nothing_else_does():
    numbers = {spec.name for spec in RACK_SPECS + HOST_SPECS if spec.type in (int, float)}
    assert numbers <= set(RANGES)
    assert set(RANGES) - numbers == OTHER_KEYS
    assert all(SPECS[name].range is RANGES[name] for name in numbers)


@pytest.mark.parametrize("key", sorted(RANGES))
def test_each_range_says_why_and_where_its_figures_come_from(key):
    found = RANGES[key]
    assert found.low is not None and found.high is not None and found.low < found.high
    assert len(found.source) > 20 and found.below and found.over
    assert (found.usual == (None, None)) == (not found.warn_below and not found.warn_over)


def test_the_defaults_are_in_range_and_usual():
    defaults = RackVars()
    for spec in RACK_SPECS:
        if spec.range is not None:
            value = getattr(defaults, spec.name)
            assert spec.range.problem(value) is None and spec.warning(value) is None, spec.name


# --- refused at load: file:line, the range, why ------------------------------------------


def _rack_numbers():
    return [spec for spec in RACK_SPECS if spec.range is not None]


@pytest.mark.parametrize("spec", _rack_numbers(), ids=lambda spec: spec.name)
def test_a_number_outside_its_range_is_refused_at_its_line(inv_dir, spec):
    found = spec.range
    step = 1 if spec.type is int else 0.5
    for value, why in ((found.low if found.low_open else found.low - step, found.below),
                       (found.high + step, found.over)):
        copy = Path(shutil.copytree(inv_dir, inv_dir.parent / f"{spec.name}-{value}"))
        file, line = set_var(copy, f"{spec.name}: {number(value)}")
        caught = error(copy)
        assert caught.message == (f"{file}:{line}: {spec.name}: {number(value)} is outside "
                                  f"{found.text()}: {why}")
        assert "\n" not in caught.line()


@pytest.mark.parametrize("key, line, refused, says", [
    ("ansible_port", "spark-03.yml", "ansible_port: 70000",
     "ansible_port: 70000 is outside 1..65535: a port number is 16 bits"),
    ("rank", "hosts", None, "rank: 8 is outside 0..7: a rack is eight nodes"),
])
def test_a_host_number_outside_its_range_is_refused_at_its_line(inv_dir, key, line, refused,
                                                                 says):
    if refused:
        file = inv_dir / "host_vars" / line
        file.write_text(refused + "\n")
        where = 1
    else:
        file = inv_dir / "hosts.yml"
        file.write_text(file.read_text().replace("rank: 3}", "rank: 8}"))
        where = 9
    assert error(inv_dir).message == f"{file}:{where}: {says}"
    assert SPECS[key].scope in (CONNECTION, HOST)


@pytest.mark.parametrize("cap, why", [
    (9000, "at or above GB10's maximum SM clock (3,003 MHz) a burn cannot tell the cap from "
           "no cap"),
    (500, "a GPU held there under load reads as latched (under 1,000 MHz; latched GB10s run "
          "481-858)"),
])
def test_invoke_check_refuses_a_cap_outside_its_range(rack_dir, capsys, cap, why):
    """Issue 53: with clock_cap_mhz 9000 `invoke check` exited 0 (any integer >= 1 passed),
    and 500 made every burn say LATCHED."""
    file = rack_dir / "group_vars" / "all.yml"
    file.write_text(file.read_text().replace("clock_cap_mhz: 2200", f"clock_cap_mhz: {cap}"))
    assert run_check("--engine", "sglang", "-i", str(rack_dir)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {file}:8: clock_cap_mhz: {cap} is outside 1100..3002 MHz: "
                            f"{why} (e.g. clock_cap_mhz: 2200)\n")


def test_the_powers_must_agree_with_each_other(inv_dir):
    file, line = set_var(inv_dir, "node_watts_capped: 230")
    assert error(inv_dir).line() == (
        f"{file}:{line}: node_watts_capped (230 W) is above node_watts_uncapped (217 W): the "
        "cap lowers a node's draw (the field: 178 W capped, 217 W uncapped) (swap them, or "
        "measure both again)")
    file.write_text(file.read_text().replace("node_watts_capped: 230", "power_strip_watts: 300"
                                             "\npower_margin_watts: 300"))
    assert error(inv_dir).message == (
        f"{file}:{line + 1}: power_margin_watts (300 W) leaves nothing of the 300 W strip "
        "(power_strip_watts)")


def test_a_bad_outlet_is_refused_at_its_own_line(inv_dir):
    file, _ = set_var(inv_dir, "pdu:\n  name: strip\n  address: 192.0.2.60\n  port: 161\n"
                      "  outlets:\n    spark-01: 1\n    spark-02: 2\n    spark-03: 97\n"
                      "    spark-04: 4")
    lines = file.read_text().splitlines()
    assert error(inv_dir).message == (
        f"{file}:{lines.index('    spark-03: 97') + 1}: pdu: outlets: spark-03: 97 is outside "
        "1..96: two daisy-chained rack PDUs carry at most 96 outlets")
    file.write_text(file.read_text().replace("spark-03: 97", "spark-03: 3").replace(
        "port: 161", "port: 0"))
    assert error(inv_dir).message == (
        f"{file}:{lines.index('  port: 161') + 1}: pdu: port: 0 is outside 1..65535: 0 is no "
        "port")


# --- legal but unusual: one line of warning ----------------------------------------------


def test_a_cap_above_what_the_field_measured_is_one_line_of_warning(rack_dir, capsys):
    file = rack_dir / "group_vars" / "all.yml"
    file.write_text(file.read_text().replace("clock_cap_mhz: 2200", "clock_cap_mhz: 2600"))
    assert run_check("--engine", "sglang", "-i", str(rack_dir)) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == [
        f"warning: {file}:8: clock_cap_mhz: 2600 MHz is above the 2,200 MHz the field measured "
        "(1,350-1,425 W on the 1,440 W strip): the draw here is unmeasured, node_watts_capped "
        "is 2,200's, and over ~2,420 a burn cannot tell it from no cap"]
    assert load_inventory(rack_dir).vars.clock_cap_mhz == 2600


@pytest.mark.parametrize("line, says", [
    ("node_watts_capped: 150", "node_watts_capped: 150 W is below the 178 W per node the field "
     "measured at the 2,200 MHz cap under long prefill"),
    ("indexer_mem_fraction: 0.2", "indexer_mem_fraction: 0.2 is above the 0.01 the field "
     "report runs"),
])
def test_other_unusual_values_warn_at_their_line(inv_dir, line, says):
    file, where = set_var(inv_dir, line)
    [warning] = load_inventory(inv_dir).warnings
    assert warning.startswith(f"{file}:{where}: {says}")


def test_the_shipped_inventories_load_without_a_warning():
    for name in ("rack", "rehearsal"):
        assert load_inventory(REPO / "inventory" / name).warnings == ()


# --- the docs' table ---------------------------------------------------------------------


def _usual(found) -> str:
    """The band a value warns outside, as the docs' table writes it ('-': none)."""
    low, high = found.usual
    unit = f" {found.unit}" if found.unit else ""
    if low is not None and high is not None:
        return f"{number(low)}..{number(high)}{unit}"
    if low is not None or high is not None:
        return f"at {'least' if low is not None else 'most'} {number(low or high)}{unit}"
    return "-"


def test_the_docs_table_is_the_ranges_table():
    """docs/inventory.md#ranges lists every range as ranges.py has it: key, range, the band
    outside which it warns, source."""
    text = (REPO / "docs" / "inventory.md").read_text()
    section = text.split("\n## Ranges\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        key, shown, usual, source = (cell.strip() for cell in row.strip("|").split(" | ", 3))
        found[key.strip("`")] = (shown, usual, re.sub(r"\s+", " ", source))
    assert set(found) == set(RANGES)
    for key, item in RANGES.items():
        assert found[key] == (item.text(), _usual(item), item.source), key
