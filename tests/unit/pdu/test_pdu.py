"""The PDU: the inventory's pdu: section (every mistake one line naming file:line), the
SNMPv3 client against the rehearsal's own agent on loopback (real pysnmp on both ends, and
net-snmp's snmpget where it is installed), and the strip check (pure)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from freeport import free_port
from hosttools import need

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.inventory import load_inventory
from sparkrack.pdu import PduError, cycle_outlet, read_strip
from sparkrack.pdu import rpdu2 as mib
from sparkrack.pdu.snmp import Session
from sparkrack.rehearsal.pduagent import Pdu, build_engine
from sparkrack.safety.stripcheck import strip_check

FIXTURE = Path(__file__).parents[1] / "data" / "inventory"
KEYS = {"SPARKRACK_PDU_USER": "ops", "SPARKRACK_PDU_AUTH_KEY": "auth-key-7f3a9",
        "SPARKRACK_PDU_PRIV_KEY": "priv-key-c41e2"}
SECTION = ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  port: {port}\n"
           "  outlets: {{spark-01: 1, spark-02: 2, spark-03: 3, spark-04: 4}}\n")


def inventory_dir(tmp_path: Path, section: str) -> Path:
    """The four-node fixture inventory with section appended to group_vars/all.yml."""
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "rack"))
    with open(directory / "group_vars" / "all.yml", "a") as file:
        file.write(section)
    return directory


# --- the section ------------------------------------------------------------------------


@pytest.mark.parametrize("body, message", [
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 1}\n",
     "pdu: outlets: spark-02, spark-03, spark-04 on no outlet"),
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 1, spark-02: 2, "
     "spark-03: 3, spark-04: 4, spark-09: 5}\n", "pdu: outlets: 'spark-09' is not a host"),
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 1, spark-02: 1}\n",
     "pdu: outlets: outlet 1 is given to both spark-01 and spark-02"),
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 0}\n",
     "pdu: outlets: spark-01: 0 is outside 1..96: outlets count from 1"),
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 1}\n"
     "  auth_key: hunter2hunter2\n", "pdu: unknown key 'auth_key'"),
    ("pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {spark-01: 1}\n"
     "  auth_key_env: hunter2hunter2\n", "auth_key_env: not an environment variable name"),
    ("pdu:\n  name: strip-a\n  outlets: {spark-01: 1}\n", "pdu: 'address' is missing"),
    ("pdu:\n  name: strip-a\n  address: 'fe80::1%eth0'\n  outlets: {spark-01: 1}\n",
     "has a zone index"),
])
def test_a_wrong_section_is_one_line_naming_its_line(tmp_path, body, message):
    directory = inventory_dir(tmp_path, body)
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    line = caught.value.line()
    assert message in line and "\n" not in line
    assert f"{directory / 'group_vars' / 'all.yml'}:" in line and "(" in line  # where, fix
    assert "hunter2" not in line


BLOCK = """pdu:
  name: strip-a
  address: 127.0.0.1
  port: 161
  outlets:
    spark-01: 1
    spark-02: 2
    spark-03: 3
    spark-04: 4
"""


@pytest.mark.parametrize("old, new, says", [
    ("    spark-03: 3", "    spark-03: 0", "pdu: outlets: spark-03: 0 is outside 1..96"),
    ("    spark-04: 4", "    spark-04: 2", "pdu: outlets: outlet 2 is given to both spark-02 "
                                           "and spark-04"),
    ("    spark-04: 4", "    spark-09: 4", "pdu: outlets: 'spark-09' is not a host of hosts.yml"),
    ("  port: 161", "  port: 0", "pdu: port: 0 is outside 1..65535: 0 is no port"),
    ("  address: 127.0.0.1", "  address: 'fe80::1%eth0'", "pdu: address: 'fe80::1%eth0' has a "
                                                           "zone index"),
    ("  name: strip-a", "  name: 'strip a'", "pdu: name: 'strip a' is not a name"),
    ("  port: 161", "  port: 161\n  community: public", "pdu: unknown key 'community'"),
])
def test_a_wrong_value_is_named_at_its_own_line_not_the_sections(tmp_path, old, new, says):
    """Issue 57 item 2: a bad outlet was reported at `pdu:`'s line, not at its own."""
    directory = inventory_dir(tmp_path, BLOCK.replace(old, new))
    all_yml = directory / "group_vars" / "all.yml"
    lines = all_yml.read_text().splitlines()
    at = lines.index(new.split("\n")[-1]) + 1
    assert at > lines.index("pdu:") + 1
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    line = caught.value.line()
    assert line.startswith(f"{all_yml}:{at}: {says}"), line
    assert len(line.replace(str(directory), "inventory/rack")) <= 200, line


def test_a_member_on_no_outlet_is_named_at_the_outlets_line(tmp_path):
    directory = inventory_dir(tmp_path, BLOCK.replace("    spark-04: 4\n", ""))
    all_yml = directory / "group_vars" / "all.yml"
    at = all_yml.read_text().splitlines().index("  outlets:") + 1
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    assert caught.value.line().startswith(f"{all_yml}:{at}: pdu: outlets: spark-04 on no outlet")


@pytest.mark.parametrize("key, variable", [
    ("user_env", "HF_TOKEN"),  # the token went to the PDU as the SNMPv3 user name
    ("auth_key_env", "LD_PRELOAD"),  # into the root service's EnvironmentFile
    ("priv_key_env", "PYTHONPATH"),
    ("auth_key_env", "SPARKRACK_PDU_"), ("auth_key_env", "SPARKRACK_PDU"),
    ("priv_key_env", "AWS_SECRET_ACCESS_KEY"),
])
def test_the_section_names_only_sparkrack_pdu_variables(tmp_path, key, variable):
    """Issue 53 item 3: `pdu:` could name any variable of the operator's environment."""
    section = (f"pdu:\n  name: strip-a\n  address: 127.0.0.1\n  outlets: {{spark-01: 1, "
               f"spark-02: 2, spark-03: 3, spark-04: 4}}\n  {key}: {variable}\n")
    directory = inventory_dir(tmp_path, section)
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    line = caught.value.line()
    all_yml = directory / "group_vars" / "all.yml"
    at = all_yml.read_text().splitlines().index(f"  {key}: {variable}") + 1
    assert line == (
        f"{all_yml}:{at}: pdu: {key}: {variable} is not a SPARKRACK_PDU_* variable, the only "
        "ones the watchdog gets (e.g. auth_key_env: SPARKRACK_PDU_AUTH_KEY)")


@pytest.mark.parametrize("value", ["hunter2 hunter2", "hunter2hunter2", "sparkrack_pdu_user"])
def test_a_secret_written_where_a_name_belongs_is_refused_without_showing_it(tmp_path, value):
    directory = inventory_dir(tmp_path, "pdu:\n  name: strip-a\n  address: 127.0.0.1\n"
                              f"  outlets: {{spark-01: 1}}\n  auth_key_env: '{value}'\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    line = caught.value.line()
    assert "pdu: auth_key_env: not an environment variable name (not shown: " in line
    assert f"{directory / 'group_vars' / 'all.yml'}:" in line and value not in line


def test_the_section_names_its_own_variables(tmp_path):
    pdu = load_inventory(inventory_dir(tmp_path, SECTION.format(port=161) + (
        "  auth_key_env: SPARKRACK_PDU_LAB_AUTH\n"))).vars.pdu
    assert (pdu.user_env, pdu.auth_key_env) == ("SPARKRACK_PDU_USER", "SPARKRACK_PDU_LAB_AUTH")


def test_the_section_loads(tmp_path):
    pdu = load_inventory(inventory_dir(tmp_path, SECTION.format(port=1161))).vars.pdu
    assert (pdu.name, pdu.address, pdu.port) == ("strip-a", "127.0.0.1", 1161)
    assert pdu.outlet_of("spark-03") == 3 and pdu.node_on(4) == "spark-04"
    assert pdu.auth_key_env == "SPARKRACK_PDU_AUTH_KEY"


# --- the client against a real agent ----------------------------------------------------


class Outlets:
    """Four nodes and a heater on outlet 6, switched in memory."""

    name, count = "strip-a", 8

    def __init__(self):
        self.on = {n: True for n in range(1, 9)}
        self.draw = {1: 31, 2: 29, 3: 35, 4: 27, 6: 300}
        self.switched: list[tuple[int, bool]] = []

    def label(self, outlet):
        return f"outlet {outlet}"

    def is_on(self, outlet):
        return self.on[outlet]

    def watts(self, outlet):
        return self.draw.get(outlet, 0) if self.on[outlet] else 0

    def switch(self, outlet, on):
        self.switched.append((outlet, on))
        self.on[outlet] = on


@contextlib.contextmanager
def serving(model: str):
    """The rehearsal's SNMPv3 agent for model on a free loopback port, over in-memory
    outlets: (port, outlets)."""
    port = free_port(kind=socket.SOCK_DGRAM)
    outlets, stop = Outlets(), threading.Event()

    def serve():
        async def main():
            engine = build_engine(Pdu(outlets, log=lambda line: None, model=model), "127.0.0.1",
                                  port, KEYS["SPARKRACK_PDU_USER"],
                                  KEYS["SPARKRACK_PDU_AUTH_KEY"], KEYS["SPARKRACK_PDU_PRIV_KEY"])
            engine.transport_dispatcher.job_started(1)
            engine.open_dispatcher()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            engine.transport_dispatcher.job_finished(1)
            engine.close_dispatcher()
        asyncio.run(main())

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        yield port, outlets
    finally:
        stop.set()
        worker.join(5)


@pytest.fixture
def agent():
    """An APC rPDU2 agent (the inventory's default model)."""
    with serving("apc-rpdu2") as found:
        yield found


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def test_the_strip_reads_every_outlet_and_the_whole_load(tmp_path, agent, keys):
    port, outlets = agent
    inventory = load_inventory(inventory_dir(tmp_path, SECTION.format(port=port)))
    reading = read_strip(inventory)
    assert [(o.node, o.outlet, o.on, o.watts) for o in reading.outlets] == [
        ("spark-01", 1, True, 31), ("spark-02", 2, True, 29), ("spark-03", 3, True, 35),
        ("spark-04", 4, True, 27)]
    assert reading.device_watts == 420  # 422 W in hundredths of kW: the heater counts
    assert reading.measured_watts == 420


def test_a_power_cycle_is_the_pdus_own_timed_reboot(tmp_path, agent, keys):
    port, outlets = agent
    inventory = load_inventory(inventory_dir(tmp_path, SECTION.format(port=port)))
    said = []
    assert cycle_outlet(inventory, "spark-03", 5, on_event=said.append) == 3
    session = Session(inventory.vars.pdu)
    assert session.get([mib.oid(mib.OUTLET_REBOOT_DURATION, 3)]) == {
        mib.oid(mib.OUTLET_REBOOT_DURATION, 3): 5}
    deadline = time.monotonic() + 20
    while outlets.switched != [(3, False), (3, True)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert outlets.switched == [(3, False), (3, True)]  # off, then on by itself
    assert "outlet 3 (spark-03): off for 5 s, then on" in said[0]
    with pytest.raises(UsageError, match=r"--off-seconds 61: PDU strip-a \(apc-rpdu2\) keeps "
                       "an outlet off for 5-60 s"):
        cycle_outlet(inventory, "spark-03", 61)


def test_the_agent_refuses_what_a_pdu_refuses(tmp_path, agent, keys):
    port, _ = agent
    session = Session(load_inventory(inventory_dir(tmp_path, SECTION.format(port=port))).vars.pdu)
    with pytest.raises(PduError, match="wrongValue"):
        session.set([(mib.oid(mib.OUTLET_REBOOT_DURATION, 3), 99)])
    with pytest.raises(PduError, match="notWritable"):
        session.set([(mib.oid(mib.OUTLET_POWER, 3), 0)])


def test_credentials_come_from_the_environment_and_are_never_shown(tmp_path, agent,
                                                                   monkeypatch):
    port, _ = agent
    inventory = load_inventory(inventory_dir(tmp_path, SECTION.format(port=port)))
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PduError) as missing:
        read_strip(inventory)
    assert "SPARKRACK_PDU_USER, SPARKRACK_PDU_AUTH_KEY, SPARKRACK_PDU_PRIV_KEY not set" in \
        missing.value.line()
    monkeypatch.setenv("SPARKRACK_PDU_USER", "ops")
    monkeypatch.setenv("SPARKRACK_PDU_AUTH_KEY", "wrong-auth-key")
    monkeypatch.setenv("SPARKRACK_PDU_PRIV_KEY", KEYS["SPARKRACK_PDU_PRIV_KEY"])
    with pytest.raises(PduError) as wrong:
        read_strip(inventory)
    line = wrong.value.line()
    assert f"PDU strip-a (127.0.0.1:{port})" in line
    assert "wrong-auth-key" not in line and KEYS["SPARKRACK_PDU_PRIV_KEY"] not in line
    assert "wrong-auth-key" not in repr(Session(inventory.vars.pdu).creds)


def test_net_snmp_reads_the_outlets(agent):
    snmpget = need("snmpget")
    port, _ = agent
    done = subprocess.run(
        [snmpget, "-v3", "-l", "authPriv", "-u", "ops", "-a", "SHA", "-A",
         KEYS["SPARKRACK_PDU_AUTH_KEY"], "-x", "AES", "-X", KEYS["SPARKRACK_PDU_PRIV_KEY"],
         "-On", f"127.0.0.1:{port}", *(mib.oid(mib.OUTLET_POWER, n) for n in (1, 6))],
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f".{mib.oid(mib.OUTLET_POWER, 6)} = INTEGER: 300" in done.stdout


# --- the check --------------------------------------------------------------------------


def test_the_strip_check_adds_each_node_up_to_its_worst_case():
    from sparkrack.pdu import OutletReading, StripReading

    reading = StripReading("strip-a", 420, (OutletReading("spark-01", 1, True, 31),
                                            OutletReading("spark-02", 2, True, 178),
                                            OutletReading("spark-03", 3, False, 0)))
    check = strip_check(reading, {"spark-01": 178, "spark-02": 178, "spark-03": 217,
                                  "spark-04": 217}, 1440, "up would add")
    assert check.adds_watts == 147 + 0 + 217 + 217  # spark-04: on no outlet, all of it
    assert check.total_watts == 420 + 581 and not check.blocking
    assert check.reason == ("measured 420 W on strip-a + 581 W up would add = 1,001 W <= "
                            "1,440 W strip")
    assert strip_check(reading, {"spark-01": 1200}, 1440, "x").blocking
