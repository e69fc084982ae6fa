"""The watchdog's power cycle of a latched node: only when installed with
--allow-power-cycle (the unit then runs the watchdog with the flag), only with a PDU outlet
feeding the node; otherwise one line saying why, and nothing touched."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from test_watchdog_install import rehearsal_copy, unit_of

from sparkrack.inventory import load_inventory
from sparkrack.watchdog.powercycle import cycle_latched


def test_the_install_flag_reaches_the_units_command_line(tmp_path):
    unit, _ = unit_of(tmp_path, install_dir="/opt/sr", listen="10.77.1.11",
                      allow_power_cycle=True)
    assert unit["Service"]["ExecStart"].endswith(
        "--state /var/lib/sparkrack/watchdog/state.json --allow-power-cycle")
    plain, _ = unit_of(tmp_path / "plain", install_dir="/opt/sr", listen="10.77.1.11")
    assert "--allow-power-cycle" not in plain["Service"]["ExecStart"]


def test_the_service_accepts_the_flag():
    shown = subprocess.run([sys.executable, "-m", "sparkrack.watchdog", "--help"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--allow-power-cycle" in shown.stdout


def test_without_the_flag_the_watchdog_only_says_so(tmp_path):
    inventory = load_inventory(rehearsal_copy(tmp_path))
    said = []
    line = cycle_latched(inventory, "spark-03", allowed=False, say=said.append)
    assert line == ("spark-03: GPU latched; not power-cycled (the watchdog was installed "
                    "without --allow-power-cycle): `invoke power-cycle -n spark-03`")
    assert said == []


def test_without_an_outlet_the_watchdog_cannot(tmp_path):
    inventory = load_inventory(rehearsal_copy(tmp_path))
    no_pdu = dataclasses.replace(inventory, vars=dataclasses.replace(inventory.vars, pdu=None))
    line = cycle_latched(no_pdu, "spark-03", allowed=True, say=lambda line: None)
    assert line == "spark-03: GPU latched; no PDU outlet feeds it in the inventory: not power-cycled"
