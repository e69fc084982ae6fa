"""The PDU's models (`pdu.model`): APC's rPDU2 and Server Technology's Sentry4, switched or
metered only. sparkrack reads each model's objects from the rehearsal's agent speaking that
model on loopback (real pysnmp on both ends, net-snmp's snmpget too); a metered-only strip is
read and never cycled, refused in one line naming the model before anything is sent; an
outlet the PDU says does not switch is refused before any SET; a model's objects are not
answered by the other model's PDU."""

from __future__ import annotations

import subprocess
import time

import pytest
from hosttools import need
from test_pdu import KEYS, inventory_dir, serving

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.inventory import load_inventory
from sparkrack.inventory.pdu import MODELS
from sparkrack.lifecycle.powercycle import plan_cycle
from sparkrack.pdu import PduError, cycle_outlet, read_strip, rpdu2, sentry4
from sparkrack.pdu.families import FAMILIES
from sparkrack.pdu.snmp import Session

SECTION = ("pdu:\n  name: strip-s\n  model: {model}\n  address: 127.0.0.1\n  port: {port}\n"
           "  outlets: {{spark-01: 1, spark-02: 2, spark-03: 3, spark-04: 4}}\n")


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def rack_for(tmp_path, model: str, port: int):
    return load_inventory(inventory_dir(tmp_path, SECTION.format(model=model, port=port)))


def test_every_model_the_inventory_takes_has_a_family():
    assert tuple(FAMILIES) == MODELS
    assert [(f.mib, f.switched, f.off_seconds) for f in FAMILIES.values()] == [
        ("APC PowerNet-MIB rPDU2", True, (5, 60)),
        ("Server Technology Sentry4-MIB", True, (5, 600)),
        ("Server Technology Sentry4-MIB", False, (5, 600))]


def test_the_model_is_apc_unless_named_and_an_unknown_one_is_refused_at_its_line(tmp_path):
    plain = load_inventory(inventory_dir(tmp_path / "a", "pdu:\n  name: strip-a\n  address: "
                                         "127.0.0.1\n  outlets: {spark-01: 1, spark-02: 2, "
                                         "spark-03: 3, spark-04: 4}\n"))
    assert plain.vars.pdu.model == "apc-rpdu2"
    directory = inventory_dir(tmp_path / "b", SECTION.format(model="raritan-px3", port=161))
    with pytest.raises(InventoryError) as caught:
        load_inventory(directory)
    line = caught.value.line()
    lines = (directory / "group_vars" / "all.yml").read_text().splitlines()
    at = next(i for i, text in enumerate(lines, 1) if "model: raritan-px3" in text)
    assert f"all.yml:{at}:" in line and "pdu: model: 'raritan-px3' is not a model" in line
    assert "apc-rpdu2, sentry4-switched, sentry4-metered" in line and "\n" not in line


def test_a_sentry4_strip_is_read_from_its_cord_and_outlets(tmp_path, keys):
    with serving("sentry4-switched") as (port, outlets):
        reading = read_strip(rack_for(tmp_path, "sentry4-switched", port))
    assert [(o.node, o.outlet, o.on, o.watts) for o in reading.outlets] == [
        ("spark-01", 1, True, 31), ("spark-02", 2, True, 29), ("spark-03", 3, True, 35),
        ("spark-04", 4, True, 27)]
    assert reading.device_watts == 422  # input cord A, in W: the heater on outlet 6 counts
    assert reading.measured_watts == 422


def test_a_sentry4_power_cycle_is_its_reboot_action_after_the_shared_delay(tmp_path, keys):
    with serving("sentry4-switched") as (port, outlets):
        inventory = rack_for(tmp_path, "sentry4-switched", port)
        said = []
        assert cycle_outlet(inventory, "spark-03", 7, on_event=said.append) == 3
        delay = sentry4.scalar(sentry4.OUTLET_REBOOT_DELAY)
        assert Session(inventory.vars.pdu).get([delay]) == {delay: 7}
        deadline = time.monotonic() + 20
        while outlets.switched != [(3, False), (3, True)] and time.monotonic() < deadline:
            time.sleep(0.2)
    assert outlets.switched == [(3, False), (3, True)]  # off, then on by itself
    assert "strip-s outlet 3 (spark-03): off for 7 s, then on" in said[0]
    with pytest.raises(UsageError, match=r"--off-seconds 601: PDU strip-s \(sentry4-switched\) "
                       "keeps an outlet off for 5-600 s"):
        cycle_outlet(inventory, "spark-03", 601)


def test_a_metered_strip_is_read_and_never_cycled(tmp_path, keys):
    with serving("sentry4-metered") as (port, outlets):
        inventory = rack_for(tmp_path, "sentry4-metered", port)
        assert read_strip(inventory).of("spark-02").watts == 29
        with pytest.raises(UsageError) as refused:
            cycle_outlet(inventory, "spark-03", 10)
        line = refused.value.line()
        assert line.startswith("PDU strip-s is a sentry4-metered: a metered strip that does "
                               "not switch outlets: sparkrack reads it, never cycles spark-03")
        assert "\n" not in line
        with pytest.raises(UsageError, match="is a sentry4-metered"):
            plan_cycle(inventory, inventory.node("spark-03"), 10, fleet=None)
        action = sentry4.oid(sentry4.OUTLET_CONTROL_ACTION, 3)
        with pytest.raises(PduError):  # the strip itself has no control to set
            Session(inventory.vars.pdu).set([(action, sentry4.ACTION_REBOOT)])
        time.sleep(0.5)
    assert outlets.switched == []


def test_an_outlet_the_pdu_says_does_not_switch_gets_no_set(tmp_path, keys):
    """The inventory says switched, the PDU's own capabilities say metered only."""
    with serving("sentry4-metered") as (port, outlets):
        inventory = rack_for(tmp_path, "sentry4-switched", port)
        with pytest.raises(PduError, match=r"outlet 3 \(spark-03\) does not switch: the PDU "
                           "reports it metered only"):
            cycle_outlet(inventory, "spark-03", 10)
    assert outlets.switched == []


@pytest.mark.parametrize("agent_model, inventory_model", [("sentry4-switched", "apc-rpdu2"),
                                                          ("apc-rpdu2", "sentry4-switched")])
def test_one_models_objects_are_not_answered_by_the_other(tmp_path, keys, agent_model,
                                                          inventory_model):
    with serving(agent_model) as (port, _):
        with pytest.raises(PduError, match=f"has no .*pdu.model {inventory_model}"):
            read_strip(rack_for(tmp_path, inventory_model, port))


def snmpget(port: int, *oids: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [need("snmpget"), "-v3", "-l", "authPriv", "-u", "ops", "-a", "SHA", "-A",
         KEYS["SPARKRACK_PDU_AUTH_KEY"], "-x", "AES", "-X", KEYS["SPARKRACK_PDU_PRIV_KEY"],
         "-On", f"127.0.0.1:{port}", *oids], capture_output=True, text=True, timeout=30)


def test_net_snmp_reads_both_families():
    with serving("sentry4-switched") as (port, _):
        done = snmpget(port, sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, 6),
                       sentry4.oid(sentry4.CORD_ACTIVE_POWER),
                       sentry4.oid(sentry4.OUTLET_CAPABILITIES, 1))
        apc = snmpget(port, rpdu2.oid(rpdu2.OUTLET_POWER, 6))
    assert done.returncode == 0, done.stderr
    assert f".{sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, 6)} = INTEGER: 300" in done.stdout
    assert f".{sentry4.oid(sentry4.CORD_ACTIVE_POWER)} = INTEGER: 422" in done.stdout
    assert f".{sentry4.oid(sentry4.OUTLET_CAPABILITIES, 1)} = " in done.stdout
    assert "No Such Object" in apc.stdout  # a Sentry4 answers no rPDU2 object
    with serving("apc-rpdu2") as (port, _):
        done = snmpget(port, rpdu2.oid(rpdu2.OUTLET_POWER, 6))
    assert f".{rpdu2.oid(rpdu2.OUTLET_POWER, 6)} = INTEGER: 300" in done.stdout


def test_an_outlet_the_pdu_does_not_meter_counts_whole_and_shows_no_watts():
    """A Sentry4 without per-outlet sensing reads -1 W: the strip check counts the node's
    whole worst case, the watchdog exports no outlet watts for it (absent, not 0), `power`
    shows the outlet on."""
    from prometheus_client import generate_latest

    from sparkrack.cli.power_tasks import _outlet
    from sparkrack.pdu import OutletReading, StripReading
    from sparkrack.safety.stripcheck import strip_check
    from sparkrack.watchdog.metrics import Snapshot, WatchdogMetrics, update

    family = FAMILIES["sentry4-switched"]
    values = {sentry4.oid(sentry4.OUTLET_STATE, 2): sentry4.STATE_ON,
              sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, 2): sentry4.NOT_MEASURED}
    assert family.outlet(values, 2) == (True, None)
    reading = StripReading("strip-s", 300, (OutletReading("spark-01", 1, True, 100),
                                            OutletReading("spark-02", 2, True, None)))
    assert reading.measured_watts == 300
    check = strip_check(reading, {"spark-01": 178, "spark-02": 178}, 1440, "up would add")
    assert check.adds_watts == 78 + 178
    metrics = WatchdogMetrics()
    update(metrics, Snapshot(nodes=(), strip=reading))
    text = generate_latest(metrics.registry).decode()
    assert 'sparkrack_pdu_outlet_watts{node="spark-01",outlet="1",pdu="strip-s"} 100.0' in text
    assert 'sparkrack_pdu_outlet_watts{node="spark-02"' not in text
    assert 'sparkrack_pdu_outlet_on{node="spark-02",outlet="2",pdu="strip-s"} 1.0' in text
    assert _outlet(reading.outlets[1]) == "on (outlet 2)"
