"""A node that answers nothing over SSH, judged (issue 56 item 6): wedged when its kernel
still takes TCP and its outlet draws, unreachable for its power at ~0 W or a switched-off
outlet, unreachable for its cable (or a silent kernel) when nothing answers while it draws;
and the service acting on it: a wedged node power-cycled as a latched GPU is (with
--allow-power-cycle, after watchdog_power_cycle_samples polls), named with its outlet and
watts otherwise; a cut-off node never cycled."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
from fakerack import NAMES, guarded, healthy, metric

from sparkrack.pdu.nodeoutlets import OutletReading, StripReading
from sparkrack.watchdog.cycler import sightings
from sparkrack.watchdog.silence import (
    CUT_OFF,
    GREETED,
    NO_ANSWER,
    NO_POWER,
    REFUSED,
    TAKEN,
    UNKNOWN,
    WEDGED,
    judge,
)
from sparkrack.watchdog.watch import Poll

WHY = "no answer within 5 s on 10.77.1.13:22"
SAMPLES = 2  # cycling.CAUSE_SAMPLES["wedged"]


def reading(watts: int | None, on: bool = True) -> OutletReading:
    return OutletReading("spark-03", 3, on, watts)


@pytest.mark.parametrize("tcp, outlet, kind", [
    (TAKEN, reading(72), WEDGED),  # the kernel takes TCP, nothing above it, powered
    (REFUSED, reading(72), WEDGED),  # the kernel resets the connection: it runs
    (TAKEN, None, WEDGED),  # the kernel answered: powered and cabled, the PDU not read
    (NO_ANSWER, reading(72), CUT_OFF),  # powered, silent to the last packet: cable or kernel
    (NO_ANSWER, reading(0), NO_POWER),  # nothing drawn: its power
    (NO_ANSWER, reading(3), NO_POWER),  # a brick's standby
    (NO_ANSWER, reading(0, on=False), NO_POWER),  # its outlet switched off
    (NO_ANSWER, None, UNKNOWN),  # silent, no PDU reading: cannot tell
    (GREETED, reading(72), UNKNOWN),  # sshd speaks again: slow, not silent
])
def test_a_silent_node_is_judged_from_its_kernel_and_its_outlet(tcp, outlet, kind):
    silence = judge("spark-03", WHY, "rack-pdu", 3, outlet, tcp)
    assert silence.kind == kind, silence
    assert silence.line.startswith(f"node spark-03 lost ({WHY})"), silence.line
    assert silence.outlet == "rack-pdu:3"


def test_the_lines_name_the_node_its_outlet_its_draw_and_the_fix():
    wedged = judge("spark-03", WHY, "rack-pdu", 3, reading(72), TAKEN).line
    assert wedged == (
        f"node spark-03 lost ({WHY}): wedged: SSH unanswered, its kernel still taking "
        "TCP on the SSH port, while rack-pdu outlet 3 draws 72 W: a host wedged by "
        "unified-memory exhaustion (NV_ERR_NO_MEMORY, no OOM kill) comes back only through "
        "a power cycle: `invoke power-cycle -n spark-03`")
    unread = judge("spark-03", WHY, "rack-pdu", 3, None, TAKEN).line
    assert "(rack-pdu outlet 3: its draw not read)" in unread
    cut = judge("spark-03", WHY, "rack-pdu", 3, reading(72), NO_ANSWER).line
    assert ("unreachable: cable or a silent kernel: nothing answers, not even its kernel, "
            "while rack-pdu outlet 3 draws 72 W") in cut and "check its network cable" in cut
    off = judge("spark-03", WHY, "rack-pdu", 3, reading(0), NO_ANSWER).line
    assert "unreachable: power: rack-pdu outlet 3 draws 0 W, no running Spark" in off


def test_only_a_wedged_node_is_a_cause_to_power_cycle():
    poll = Poll(silences=[judge(node, WHY, "pdu", 3, reading(72), tcp)
                          for node, tcp in (("spark-02", NO_ANSWER), ("spark-03", TAKEN))])
    assert [(s.node, s.cause, s.seen) for s in sightings(poll)] == [
        ("spark-03", "wedged", True)]


def lost_poll(deployment_id: str = "d1", node: str = "spark-03") -> Poll:
    """A poll of a group whose node did not answer (GroupWatch.poll's form)."""
    return Poll(failure=f"node {node} lost ({WHY})", lost={node: WHY},
                memory={n: (128 << 20, 100 << 20) for n in NAMES if n != node},
                detected=time.monotonic())


def strip(watts: int = 72) -> StripReading:
    return StripReading("pdu", 300, tuple(
        OutletReading(name, i + 1, True, watts if name == "spark-03" else 40)
        for i, name in enumerate(NAMES)))


def test_allowed_a_wedged_node_is_power_cycled_after_enough_polls_and_serves_again(
        tmp_path, caplog):
    """Before issue 56 item 6 the wedged node was a lost node like any: the group stopped,
    nothing cycled, the rack down until an operator."""
    rack, watchdog = guarded([healthy("d1"), lost_poll()], tmp_path, allow_power_cycle=True)
    rack.strip_reading, rack.tcp = strip(), {"spark-03": TAKEN}
    with caplog.at_level(logging.INFO, logger="sparkrack.watchdog"):
        verdicts = [watchdog.step() for _ in range(SAMPLES)]
    assert [v.verdict for v in verdicts] == ["guarding"] * (SAMPLES - 1) + ["power-cycled"]
    assert "wedged: SSH unanswered" in verdicts[0].detail
    assert verdicts[0].detail.endswith("seen in 1 of the 2 consecutive polls a power cycle "
                                       "needs")
    assert rack.cycles == ["spark-03"] and rack.restarts == ["d1"]
    assert rack.groups[0].stops == [({"spark-03": WHY}, False)]  # at once, kept for its logs
    assert rack.kept[0].cause == "wedged"
    assert metric(watchdog, "sparkrack_watchdog_power_cycle_timestamp_seconds",
                  node="spark-03", cause="wedged", outcome="ok") is not None
    assert watchdog.step().verdict == "guarding"  # the group started again, guarded
    assert any("spark-03: host wedged (SSH unanswered, its kernel and outlet alive) for 2 "
               "consecutive polls" in r.getMessage() for r in caplog.records)


def test_not_allowed_a_wedged_node_is_named_with_its_outlet_and_watts_and_stopped(tmp_path):
    rack, watchdog = guarded([healthy("d1"), lost_poll()], tmp_path)
    rack.strip_reading, rack.tcp = strip(), {"spark-03": TAKEN}
    step = watchdog.step()
    assert step.verdict == "stopped" and rack.cycles == []
    assert step.detail.startswith(
        f"node spark-03 lost ({WHY}): wedged: SSH unanswered, its kernel still taking TCP "
        "on the SSH port, while pdu outlet 3 draws 72 W: ")
    assert "`invoke power-cycle -n spark-03`" in step.detail
    assert rack.actions[0][2].startswith(f"node spark-03 lost ({WHY}): wedged")


@pytest.mark.parametrize("tcp, watts, said", [
    (NO_ANSWER, 72, "unreachable: cable or a silent kernel"),
    (NO_ANSWER, 0, "unreachable: power"),
])
def test_allowed_a_node_cut_off_is_never_power_cycled(tmp_path, tcp, watts, said):
    rack, watchdog = guarded([healthy("d1"), lost_poll()], tmp_path, allow_power_cycle=True)
    rack.strip_reading, rack.tcp = strip(watts), {"spark-03": tcp}
    step = watchdog.step()
    assert step.verdict == "stopped" and rack.cycles == []
    assert f"node spark-03 lost ({WHY}): {said}" in step.detail


def test_a_node_silent_in_one_poll_only_is_not_power_cycled(tmp_path):
    """A passing stall (one poll lost, the next whole) starts the count over: nothing cut."""
    blips = [healthy("d1"), lost_poll(), healthy("d1"), lost_poll(), healthy("d1")]
    rack, watchdog = guarded(blips, tmp_path, allow_power_cycle=True)
    rack.strip_reading, rack.tcp = strip(), {"spark-03": TAKEN}
    assert [watchdog.step().verdict for _ in range(4)] == ["guarding"] * 4
    assert rack.cycles == [] and rack.restarts == []


def test_a_silent_node_s_cycle_stops_the_rest_of_the_group_and_takes_any_boot_id(monkeypatch):
    """The wedged node cannot be stopped or asked its boot id: its rank goes with the cut,
    and the first boot id it answers with after the cut counts as new. Any other node that
    could not be stopped still refuses the cycle."""
    from types import SimpleNamespace

    from fakerack import rack_inventory

    from sparkrack.core.errors import SparkrackError
    from sparkrack.lifecycle import powercycle

    inventory = rack_inventory()
    plan = powercycle.CyclePlan("spark-03", "pdu", 3, 10, group="sglang 512k (d1)")
    seen: dict = {}
    errors = {"spark-03": "docker: no answer",
              "sparkrack-sglang-rank2@spark-03": "no answer"}

    class NoFleet:
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def boot_ids(*args):
        raise AssertionError("the silent node's boot id was asked")

    monkeypatch.setattr(powercycle, "down", lambda inv, on_event: SimpleNamespace(
        errors=dict(errors)))
    monkeypatch.setattr(powercycle, "Fleet", NoFleet)
    monkeypatch.setattr(powercycle, "boot_ids", boot_ids)
    monkeypatch.setattr(powercycle, "cycle_outlet", lambda *a, **k: seen.setdefault("cut", 1))
    monkeypatch.setattr(powercycle, "wait_back",
                        lambda fleet, nodes, before, *a: seen.setdefault("before", before))
    monkeypatch.setattr(powercycle, "burned", lambda inv, node: f"{node.name}: back")
    monkeypatch.setattr(powercycle, "note", lambda **k: None)
    node = inventory.node("spark-03")
    assert powercycle.power_cycle(inventory, node, plan, silent=True) == "spark-03: back"
    assert seen == {"cut": 1, "before": {"spark-03": ""}}
    errors["spark-02"] = "docker: no answer"
    with pytest.raises(SparkrackError, match="could not stop sglang 512k \\(d1\\) cleanly: "
                       "spark-02: docker: no answer"):
        powercycle.power_cycle(inventory, node, plan, silent=True)


SILENT_SSHD = """
import socket, sys, threading
import paramiko
from sparkrack.watchdog.__main__ import configure_logging
configure_logging(sys.stdout)
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
held = []
threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
transport = paramiko.Transport(server.getsockname())
transport.banner_timeout = 0.5
try:
    transport.start_client(timeout=2)
except paramiko.SSHException as error:
    import logging
    logging.getLogger("sparkrack.watchdog").info("spark-03: wedged (%s)", error)
"""


def test_a_wedged_nodes_silent_sshd_is_one_line_of_the_services_not_paramikos_traceback():
    """A node whose kernel takes TCP while its sshd sends no banner: paramiko logs that as
    an ERROR with a traceback, at every poll, into the journal; the service's logging keeps
    its own line and drops paramiko's."""
    done = subprocess.run([sys.executable, "-c", SILENT_SSHD], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("INFO spark-03: wedged (Error reading SSH protocol banner")
    assert "Traceback" not in done.stdout + done.stderr and "ERROR" not in done.stdout, done
