"""The rehearsal rack's PDU: a real SNMPv3 agent at 10.77.1.2 that net-snmp reads, whose
outlets report each node's simulated draw, whose extra loads the strip check counts, and
whose power cycle clears a latched GPU (a reboot does not: test_restart.py) so that the
node serves again."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from provision_helpers import inventory_copy
from stubgroup import nothing_runs

from sparkrack.lifecycle.lanes import down, up
from sparkrack.lifecycle.restart import RebootStopped, restart_rack
from sparkrack.pdu import rpdu2 as mib
from sparkrack.pdu import sentry4
from sparkrack.rehearsal import nodeproc, pdu
from sparkrack.rehearsal.layout import PDU_ADDR

pytestmark = pytest.mark.rack

REPO = Path(__file__).resolve().parents[2]


def invoke(*args, timeout=300, inventory="inventory/rehearsal"):
    """The invoke CLI from the repo, as an operator runs it (the PDU's keys exported)."""
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", str(inventory)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1"}, stdin=subprocess.DEVNULL)


def snmpget(*oids: str) -> subprocess.CompletedProcess:
    """Debian's snmpget, SNMPv3 authPriv, with the rehearsal PDU's user and keys."""
    keys = pdu.REHEARSAL_CREDENTIALS
    return subprocess.run(
        ["snmpget", "-v3", "-l", "authPriv", "-u", keys["SPARKRACK_PDU_USER"], "-a", "SHA",
         "-A", keys["SPARKRACK_PDU_AUTH_KEY"], "-x", "AES", "-X", keys["SPARKRACK_PDU_PRIV_KEY"],
         "-On", "-Oqv", PDU_ADDR, *oids], capture_output=True, text=True, timeout=30)


def test_snmpget_reads_eight_outlets_power(rack):
    done = snmpget(*(mib.oid(mib.OUTLET_POWER, n) for n in range(1, 9)),
                   mib.oid(mib.OUTLET_STATE, 3))
    assert done.returncode == 0, done.stderr
    values = [int(v) for v in done.stdout.split()]
    assert all(25 <= watts <= 217 for watts in values[:8]), values  # each node's own draw
    assert values[8] == mib.STATE_ON
    rack.poweroff("spark-03")  # the node's own cord out: its outlet still on, drawing 0 W
    try:
        assert snmpget(mib.oid(mib.OUTLET_POWER, 3)).stdout.split() == ["0"]
    finally:
        rack.poweron("spark-03")


def test_an_outlet_reads_its_nodes_wall_power_under_load(rack, inventory):
    """A node whose GPU computes draws at the wall what the simulator says it does (GPU plus
    the rest of the node): outlet 3 reads spark-03's own figure, far above its idle draw,
    while its neighbour stays idle."""
    import threading
    import time

    from sparkrack.safety.burn import burn

    idle = [int(v) for v in snmpget(mib.oid(mib.OUTLET_POWER, 3),
                                    mib.oid(mib.OUTLET_POWER, 4)).stdout.split()]
    burning = threading.Thread(target=burn, args=(inventory, "spark-03"),
                               kwargs={"seconds": 12.0, "record": False})
    burning.start()
    try:
        deadline, loaded = time.monotonic() + 10, []
        while time.monotonic() < deadline and not (loaded and loaded[0] >= 150):
            time.sleep(1)
            loaded = [int(v) for v in snmpget(mib.oid(mib.OUTLET_POWER, 3),
                                              mib.oid(mib.OUTLET_POWER, 4)).stdout.split()]
            wall = pdu.gpusim_state(rack.nodes[2].netns)["node_power_w"]
    finally:
        burning.join(60)
    assert loaded[0] >= 150 and abs(loaded[0] - wall) <= 30, (idle, loaded, wall)
    assert loaded[1] <= idle[1] + 5, (idle, loaded)  # spark-04 computes nothing


def test_power_and_up_and_restart_count_what_else_the_strip_feeds(engine_rack, rack):
    """The projection knows the eight nodes; the strip also feeds a 300 W load: measured
    plus what up would add passes the strip, and up starts nothing."""
    plugged = invoke("rehearsal.pdu-load", "--outlet", "10", "--watts", "300")
    assert plugged.returncode == 0, plugged.stderr
    shown = invoke("power", "--json")
    strip = json.loads(shown.stdout)["strip"]
    assert shown.returncode == 1 and strip["blocking"], shown.stdout + shown.stderr
    assert strip["measured_watts"] >= 300 + 8 * 25
    assert [o["outlet"] for o in strip["reading"]["outlets"]] == list(range(1, 9))
    refused = invoke("up", "--engine", "sglang")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = next(line for line in refused.stderr.splitlines() if line.strip().startswith("strip:"))
    assert "measured" in line and "W on rehearsal-pdu" in line and "> 1,440 W strip" in line
    assert nothing_runs(engine_rack) == []
    pdu.plug_load(engine_rack.vars.pdu, 10, 900)  # a batch's burn would pass it too
    before = {n.name: len(nodeproc.boot_times(n)) for n in rack.nodes}
    with pytest.raises(RebootStopped, match=r"batch 1: measured .* > 1,440 W strip: not rebooted"):
        restart_rack(engine_rack, batch_size=2)
    assert {n.name: len(nodeproc.boot_times(n)) for n in rack.nodes} == before


def test_a_latched_node_is_power_cycled_and_serves_again(engine_rack, rack):
    up(engine_rack, "sglang", "512k")
    rack.latch("spark-03")  # while it serves (a reboot keeps it: test_restart.py)
    boots = len(nodeproc.boot_times(rack.node("spark-03")))
    planned = invoke("power-cycle", "-n", "spark-03", "--check")
    assert planned.returncode == 0, planned.stderr
    plan = planned.stdout + planned.stderr
    assert "plan: stop sglang 512k (" in plan and "in order (rank 0 first" in plan, plan
    assert "plan: rehearsal-pdu outlet 3 (spark-03): off 5 s" not in plan  # the default, 10
    assert "--check: nothing done" in plan and rack.status()[2].latched
    cycled = invoke("power-cycle", "-n", "spark-03", "--off-seconds", "5")
    assert cycled.returncode == 0, cycled.stdout + cycled.stderr
    said = cycled.stdout + cycled.stderr
    assert "rehearsal-pdu outlet 3 (spark-03): off for 5 s" in said
    assert "spark-03: back, cap unit active this boot, burn ok" in said
    assert not rack.status()[2].latched
    assert len(nodeproc.boot_times(rack.node("spark-03"))) == boots + 1
    assert nothing_runs(engine_rack) == []  # the group was stopped first, in order
    log = invoke("log", "--task", "power-cycle", "--json")
    assert log.returncode == 0, log.stderr
    record = json.loads(log.stdout)[-1]
    assert record["outcome"] == "ok" and record["changed"]["power_cycled"] == ["spark-03"]
    assert record["changed"]["outlets"] == ["rehearsal-pdu:3"]
    up(engine_rack, "sglang", "512k")  # serves again
    down(engine_rack)


@contextlib.contextmanager
def pdu_of_model(rack, tmp_path, model: str):
    """The rehearsal PDU's agent speaking model (a copy of the rack's inventory naming it),
    for the block; the rack's own agent again after it: the copy's inventory."""
    section = dict(vars(rack.inventory.vars.pdu))
    section["outlets"] = dict(section["outlets"])
    copy = inventory_copy(rack.inventory.path, tmp_path / model, pdu={**section, "model": model})
    pdu.stop_agent()
    try:
        pdu.start_agent(copy.path, copy.vars.pdu, lambda line: None)
        yield copy
    finally:
        pdu.stop_agent()
        pdu.start_agent(rack.inventory.path, rack.inventory.vars.pdu, lambda line: None)


def test_a_sentry4_strip_is_read_by_snmpget_and_by_sparkrack_and_cycles_a_node(rack, tmp_path):
    """Issue 57 item 6: the rehearsal's agent speaks Server Technology's Sentry4-MIB as it
    speaks APC's rPDU2: net-snmp reads each outlet's power and cord A's, an rPDU2 object is
    not answered; `invoke power` reads the strip through it and `invoke power-cycle` cycles a
    node with its reboot action."""
    with pdu_of_model(rack, tmp_path, "sentry4-switched") as inventory:
        done = snmpget(*(sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, n) for n in range(1, 9)),
                       sentry4.oid(sentry4.CORD_ACTIVE_POWER),
                       sentry4.oid(sentry4.OUTLET_STATE, 3))
        assert done.returncode == 0, done.stderr
        values = [int(v) for v in done.stdout.split()]
        assert all(25 <= watts <= 217 for watts in values[:8]), values
        assert values[8] >= sum(values[:8]) - 8 and values[9] == sentry4.STATE_ON
        apc = snmpget(mib.oid(mib.OUTLET_POWER, 3))
        assert "No Such Object" in apc.stdout, apc.stdout + apc.stderr
        shown = invoke("power", "--json", inventory=inventory.path)
        strip = json.loads(shown.stdout)["strip"]
        assert strip["pdu"] == "rehearsal-pdu" and strip["measured_watts"] >= 8 * 25, shown.stderr
        boots = len(nodeproc.boot_times(rack.node("spark-03")))
        cycled = invoke("power-cycle", "-n", "spark-03", "--off-seconds", "5",
                        inventory=inventory.path)
        said = cycled.stdout + cycled.stderr
        assert cycled.returncode == 0, said
        assert "rehearsal-pdu outlet 3 (spark-03): off for 5 s" in said
        assert "spark-03: back, cap unit active this boot, burn ok" in said
        assert len(nodeproc.boot_times(rack.node("spark-03"))) == boots + 1
        delay = snmpget(sentry4.scalar(sentry4.OUTLET_REBOOT_DELAY))
        assert delay.stdout.split() == ["5"], delay.stdout  # the delay every outlet shares


def test_a_metered_only_strip_is_read_and_never_cycled(rack, tmp_path):
    with pdu_of_model(rack, tmp_path, "sentry4-metered") as inventory:
        done = snmpget(sentry4.oid(sentry4.OUTLET_ACTIVE_POWER, 3),
                       sentry4.oid(sentry4.OUTLET_CONTROL_STATE, 3))
        assert done.returncode == 0, done.stderr
        assert 25 <= int(done.stdout.split()[0]) <= 217
        assert int(done.stdout.split()[1]) == sentry4.CONTROL_FIXED_ON  # uncontrolled
        shown = invoke("power", "--json", inventory=inventory.path)
        assert json.loads(shown.stdout)["strip"]["reading"]["outlets"][2]["watts"] >= 25
        boots = len(nodeproc.boot_times(rack.node("spark-03")))
        refused = invoke("power-cycle", "-n", "spark-03", inventory=inventory.path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        [line] = [x for x in refused.stderr.splitlines() if x.startswith("error:")]
        assert line.startswith("error: PDU rehearsal-pdu is a sentry4-metered: a metered strip "
                               "that does not switch outlets: sparkrack reads it, never cycles "
                               "spark-03"), refused.stderr
        assert "Traceback" not in refused.stderr
        assert len(nodeproc.boot_times(rack.node("spark-03"))) == boots
