"""The watchdog service's decisions with a fake rack: follow the records, leave a starting
deployment alone, step aside under the rack lock, stop (or restart within the budget) a
broken ready group, keep its state across a restart of the service; and the process
itself (`python -m sparkrack.watchdog`) serving /metrics over real SSH on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import deque
from pathlib import Path

import pytest
from fakerack import (
    NAMES,
    FakeRack,
    broken,
    deployment,
    guarded,
    healthy,
    make,
    metric,
    ranks_of,
)
from freeport import free_port
from loopback import Sshd, needs_sshd, write_inventory
from prometheus_client.parser import text_string_to_metric_families

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.record import RECORD_DIR
from sparkrack.facts.node import GpuFacts, NodeFacts, UnitFacts
from sparkrack.watchdog.__main__ import parse_listen
from sparkrack.watchdog.snapshot import node_snapshot
from sparkrack.watchdog.watch import Poll

REPO = Path(__file__).resolve().parents[3]


def test_no_current_deployment_is_idle_and_serves_node_metrics():
    watchdog = make(FakeRack())
    step = watchdog.step()
    assert (step.verdict, step.acted) == ("idle", False)
    assert metric(watchdog, "sparkrack_deployment_current") == 0
    assert metric(watchdog, "sparkrack_node_up", node="spark-02") == 1
    assert metric(watchdog, "sparkrack_gpu_sm_clock_hertz", node="spark-02") == 2.19e9
    assert metric(watchdog, "sparkrack_clock_cap_verified", node="spark-02") == 1
    assert metric(watchdog, "sparkrack_power_projected_watts") == 3 * 178
    assert metric(watchdog, "sparkrack_rank_container_state") is None


def test_a_deployment_still_starting_is_left_alone():
    current = deployment("new")
    rack = FakeRack(current=current, last_good=deployment("old"),
                    containers=ranks_of("new", {"spark-01": "created"}))
    watchdog = make(rack)
    step = watchdog.step()
    assert step.verdict == "starting" and not rack.groups
    assert metric(watchdog, "sparkrack_deployment_ready") == 0
    assert metric(watchdog, "sparkrack_rank_container_state", node="spark-01",
                  state="created") == 1


def test_broken_ready_group_is_stopped_once_and_kept_for_logs(tmp_path):
    rack, watchdog = guarded([healthy("d1"), broken("d1")], tmp_path)
    assert metric(watchdog, "sparkrack_watchdog_guarding") == 1
    assert metric(watchdog, "sparkrack_group_ranks_running") == 3
    assert metric(watchdog, "sparkrack_rank0_healthy") == 1
    step = watchdog.step()
    assert (step.verdict, step.acted) == ("stopped", True)
    assert step.detail.startswith("rank 2 on spark-03 exited (exit code 1); stopped in ")
    assert rack.groups[0].stops == [({}, False)]  # stopped, not removed
    assert metric(watchdog, "sparkrack_watchdog_actions_total", action="stop") == 1
    assert metric(watchdog, "sparkrack_watchdog_detection_to_stopped_seconds") < 1
    rack.containers = ranks_of("d1", {n: "exited" for n in NAMES})
    watchdog.facts_at = None  # next step lists the containers again
    again = watchdog.step()
    assert again.verdict == "down" and not again.acted and len(rack.groups) == 1
    assert metric(watchdog, "sparkrack_group_ranks_running") == 0  # GroupDown fires
    assert metric(watchdog, "sparkrack_deployment_ready") == 1
    state = json.loads((tmp_path / "state.json").read_text())
    assert list(state["stopped"]) == ["d1"]
    assert [v["verdict"] for v in state["verdicts"]] == ["guarding", "stopped", "down"]
    # the service restarts (systemd): it remembers, and does not act again
    restarted = make(rack, tmp_path)
    assert restarted.step().verdict == "down"
    # `invoke down` clears the record: idle, and the stopped group is forgotten
    rack.current = None
    assert restarted.step().verdict == "idle" and restarted.stopped == {}


def test_a_ready_group_found_broken_at_start_is_stopped():
    """The service's node rebooted: the group's containers exited with it."""
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current,
                    containers=[r for r in ranks_of("d1", {"spark-01": "exited"})
                                if r.node != "spark-03"])
    step = make(rack).step()
    assert step.verdict == "stopped"
    assert step.detail.startswith("rank 0 on spark-01 exited (exit code None); stopped in")


def test_lock_held_steps_aside_without_acting():
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    polls=[broken("d1")], holder="alice: invoke roll (pid 4242)")
    watchdog = make(rack)
    step = watchdog.step()
    assert step.verdict == "stepped-aside"
    assert step.detail == "the rack lock is held by alice: invoke roll (pid 4242)"
    assert not rack.groups and metric(watchdog, "sparkrack_watchdog_stepped_aside") == 1
    rack.holder = None
    assert watchdog.step().verdict == "stopped"


def test_restart_policy_restarts_within_the_budget_then_stops_and_says_why(tmp_path):
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    polls=[broken("d1")])
    watchdog = make(rack, tmp_path, watchdog_action="restart", watchdog_restart_budget=1)
    step = watchdog.step()
    assert step.verdict == "restarted" and rack.restarts == ["d1"]
    assert rack.groups[0].stops == [({}, False)]
    assert metric(watchdog, "sparkrack_watchdog_actions_total", action="restart") == 1
    assert watchdog.step().verdict == "guarding"  # the new deployment, d1-again
    rack.groups[-1].polls = [broken("d1-again")]
    step = watchdog.step()
    assert step.verdict == "stopped" and rack.restarts == ["d1"]
    assert "restart budget spent: 1 restart in the last 30 min" in step.detail
    assert metric(watchdog, "sparkrack_watchdog_actions_total", action="stop") == 1
    assert json.loads((tmp_path / "state.json").read_text())["budget"]["restarts"]


def test_the_restart_budget_is_on_disk_before_the_restart(tmp_path, monkeypatch):
    """state.json is written as the project writes what must survive a power cut
    (sparkrack/core/atomic.py): the file and its directory are fsynced before the restart runs,
    and the old state stays whole until the rename."""
    synced: list[tuple[int, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    polls=[broken("d1")])
    watchdog = make(rack, tmp_path, watchdog_action="restart", watchdog_restart_budget=1)
    restarted_with: list[dict] = []
    restart = rack.restart

    def restart_after_reading_the_state(deployment) -> None:
        state = tmp_path / "state.json"
        restarted_with.append(json.loads(state.read_text()))
        info = state.stat()
        assert (info.st_dev, info.st_ino) in synced  # the file's data
        directory = tmp_path.stat()
        assert (directory.st_dev, directory.st_ino) in synced  # and its name
        restart(deployment)

    rack.restart = restart_after_reading_the_state
    assert watchdog.step().verdict == "restarted"
    assert len(restarted_with[0]["budget"]["restarts"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary left


def test_a_failed_restart_leaves_the_group_down():
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    polls=[broken("d1")],
                    restart_error=SparkrackError("sglang 512k refused: power: REFUSE"))
    watchdog = make(rack, watchdog_action="restart")
    step = watchdog.step()
    assert step.verdict == "restart-failed"
    assert step.detail.endswith("restart failed: sglang 512k refused: power: REFUSE")
    assert metric(watchdog, "sparkrack_watchdog_actions_total", action="restart_failed") == 1
    assert watchdog.step().verdict == "down" and rack.restarts == ["d1"]


def test_head_records_unreadable_while_guarding_keeps_polling_the_group():
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"))
    watchdog = make(rack)
    assert watchdog.step().verdict == "guarding"
    rack.records_error = True
    rack.groups[0].polls = [Poll(failure="node spark-01 lost (no answer within 5 s)",
                                 lost={"spark-01": "no answer"}, detected=time.monotonic())]
    step = watchdog.step()
    assert step.verdict == "stopped" and rack.groups[0].stops == [({"spark-01": "no answer"},
                                                                    False)]


def stalled(deployment_id: str, culprit: int | None = 2) -> Poll:
    from sparkrack.watchdog.culprit import Verdict
    from sparkrack.watchdog.progress import Reading
    from sparkrack.watchdog.stall import Stall

    ranks = ranks_of(deployment_id)
    verdict = Verdict({"spark-01": "busy", "spark-02": "busy", "spark-03": "spinning"},
                      None if culprit is None else NAMES[culprit],
                      "GPUs spinning 96 % at 20.1 W: spark-03; busy 100 % at 43.0 W: ...")
    stall = Stall(31.0, 30, Reading(1, 0, (5.0, 9.0)), verdict,
                  None if culprit is None else ranks[culprit])
    return Poll(failure=stall.describe(), states=ranks, head_status=200,
                detected=time.monotonic(), stall=stall, culprit=stall.culprit,
                no_progress_s=31.0)


def test_a_stalled_group_is_stopped_with_its_evidence_in_the_audit_and_metrics(tmp_path):
    rack, watchdog = guarded([healthy("d1"), stalled("d1")], tmp_path)
    assert metric(watchdog, "sparkrack_group_no_progress_seconds") == 0
    assert metric(watchdog, "sparkrack_group_stalled") is None
    step = watchdog.step()
    assert (step.verdict, step.acted) == ("stopped", True)
    assert step.detail.startswith("rank 2 on spark-03 wedged: 1 running, 0 waiting, no token "
                                  "progress for 31 s (stall budget 30 s); GPUs spinning")
    assert rack.actions == [("d1", "stopped", rack.actions[0][2])]
    assert rack.actions[0][2].startswith("rank 2 on spark-03 wedged")
    assert metric(watchdog, "sparkrack_watchdog_stalls_total") == 1
    assert metric(watchdog, "sparkrack_group_stalled", node="spark-03", rank="2") == 1
    # the service restarts: the stall is remembered while the group is down
    restarted = make(rack, tmp_path)
    assert restarted.step().verdict == "down"
    assert metric(restarted, "sparkrack_group_stalled", node="spark-03", rank="2") == 1
    rack.current = None  # `invoke down`: the alert's series ends
    restarted.step()
    assert metric(restarted, "sparkrack_group_stalled") is None


def test_a_stall_without_a_standing_out_gpu_is_still_a_stall():
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    polls=[stalled("d1", culprit=None)])
    watchdog = make(rack)
    assert watchdog.step().detail.startswith("group stalled, no rank stands out: ")
    assert metric(watchdog, "sparkrack_group_stalled", node="", rank="-1") == 1


def test_gpu_findings_of_a_guarded_poll_are_acted_on_said_once_and_exported(caplog):
    """Busy over the cap: the cap re-applied (once here: the group rate-limits it) and
    counted; latched: logged once while it stands; both in the node's metrics, with this
    poll's readings and the GPU's own thresholds."""
    from sparkrack.facts.gpu import GpuSample, Thermal
    from sparkrack.watchdog.gpuwatch import judge

    gpus = {"spark-02": GpuSample(100, 86.5, 2454, 82, 13),
            "spark-03": GpuSample(100, 10.8, 670, 40, 55)}
    findings = [f for i, node in ((1, "spark-02"), (2, "spark-03"))
                for f in judge(node, i, gpus[node], 2200)]
    poll = Poll(memory={n: (128 << 20, 100 << 20) for n in NAMES}, states=ranks_of("d1"),
                head_status=200, gpus=gpus, findings=findings)
    rack, watchdog = guarded([healthy("d1"), poll])
    rack.groups[0].thermal = {"spark-02": Thermal(97, 100)}
    with caplog.at_level("INFO", logger="sparkrack.watchdog"):
        assert watchdog.step().verdict == "guarding"
        watchdog.step()
    assert rack.groups[0].reapplied == [("spark-02", "watchdog"), ("spark-02", "watchdog")]
    said = [r.getMessage() for r in caplog.records]
    assert sum("GPU latched in its low-clock state" in line for line in said) == 1
    assert said.count("spark-02: clock cap re-applied") == 2
    assert metric(watchdog, "sparkrack_watchdog_cap_reapplied_total", node="spark-02",
                  outcome="took") == 2
    assert metric(watchdog, "sparkrack_gpu_over_cap", node="spark-02") == 1
    assert metric(watchdog, "sparkrack_gpu_latched", node="spark-03") == 1
    assert metric(watchdog, "sparkrack_gpu_latched", node="spark-02") == 0
    assert metric(watchdog, "sparkrack_gpu_sm_clock_hertz", node="spark-02") == 2.454e9
    assert metric(watchdog, "sparkrack_gpu_temperature_celsius", node="spark-02") == 82
    assert metric(watchdog, "sparkrack_gpu_slowdown_temperature_celsius", node="spark-02") == 97
    assert metric(watchdog, "sparkrack_gpu_slowdown_temperature_celsius",
                  node="spark-03") is None


def test_a_watchdog_that_cannot_read_the_records_says_it_is_blind():
    rack = FakeRack(records_error=True)
    watchdog = make(rack)
    step = watchdog.step()
    assert step.verdict == "blind"
    assert step.detail == ("deployment records unreadable: could not read the deployment "
                           "records on spark-01: lost; retrying every poll")
    assert metric(watchdog, "sparkrack_watchdog_blind") == 1
    rack.records_error = False
    assert watchdog.step().verdict == "idle"
    assert metric(watchdog, "sparkrack_watchdog_blind") == 0


def test_a_lost_nodes_rank_is_stopped_once_the_node_answers_again():
    """A rank cut off from its group keeps its process and memory (until the engine's own
    watchdog, minutes later): the service stops it as soon as its node answers."""
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"),
                    still_lost={"spark-03"})
    watchdog = make(rack)
    assert watchdog.step().verdict == "guarding"
    rack.groups[0].polls = [Poll(failure="node spark-03 lost (no answer within 5 s)",
                                 lost={"spark-03": "no answer"}, detected=time.monotonic())]
    assert watchdog.step().verdict == "stopped"
    assert [r.node for r in watchdog.left_behind] == ["spark-03"]
    assert watchdog.step().verdict == "down" and rack.stopped_left == []  # still lost
    rack.still_lost = set()
    assert watchdog.step().verdict == "down"
    assert [(r.node, r.rank) for r in rack.stopped_left] == [("spark-03", 2)]
    assert watchdog.left_behind == []
    watchdog.step()
    assert len(rack.stopped_left) == 1  # once


def test_node_snapshot_reads_cap_state_of_this_boot():
    facts = NodeFacts(boot_id="now", gpu=GpuFacts(sm_mhz=2450, power_w=120.5),
                      mem_total_kb=100, mem_available_kb=50,
                      clock_cap=UnitFacts("loaded", "failed", "failed", "exit-code"),
                      burn={"boot_id": "before", "ok": True, "time": 1.0})
    node = node_snapshot("spark-01", 0, True, facts, (100, 40), "running", False)
    assert (node.sm_clock_mhz, node.gpu_power_watts) == (2450, 120.5)
    assert (node.mem_total_bytes, node.mem_available_bytes) == (102400, 40960)  # the poll's
    assert (node.cap_unit_ok, node.cap_verified, node.cap_verified_time) == (False, False, None)
    assert node_snapshot("spark-02", 1, False, None, None, None, False).sm_clock_mhz is None


@pytest.mark.parametrize("text, expected", [
    (None, ("0.0.0.0", 9478)), ("127.0.0.1:9100", ("127.0.0.1", 9100)),
    (":9100", ("0.0.0.0", 9100)), ("10.0.0.5", ("10.0.0.5", 9478)),
    ("[::1]:9100", ("::1", 9100))])
def test_listen_address(text, expected):
    assert parse_listen(text, 9478) == expected


def test_listen_port_out_of_range_is_refused():
    with pytest.raises(ValueError):
        parse_listen("0.0.0.0:70000", 9478)


# --- The process, over real SSH on loopback ----------------------------------------------




@needs_sshd
@pytest.mark.skipif(Path(RECORD_DIR, "current.json").exists(),
                    reason="this machine has a current deployment record of its own")
def test_the_service_serves_metrics_and_stops_on_sigterm(sshd: Sshd, tmp_path: Path):
    rack = write_inventory(sshd, tmp_path / "inv")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkrack.watchdog", "--inventory", str(rack), "--listen",
         f"127.0.0.1:{port}", "--state", str(tmp_path / "state.json")], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "SPARKRACK_SANDBOX": "1"})
    try:
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline and "sparkrack_node_up{" not in text:
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
        values = {(s.name, s.labels.get("node")): s.value
                  for f in text_string_to_metric_families(text) for s in f.samples}
        assert values[("sparkrack_node_up", "spark-02")] == 1
        assert values[("sparkrack_deployment_current", None)] == 0
        assert values[("sparkrack_watchdog_actions_total", None)] == 0
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
    assert process.returncode == 0, out
    assert f"metrics on http://127.0.0.1:{port}/metrics" in out
    assert "idle: no engine deployment is current" in out
    assert json.loads((tmp_path / "state.json").read_text())["verdicts"][0]["verdict"] == "idle"


def test_the_pdus_reading_is_exported_with_each_outlet():
    from sparkrack.pdu.nodeoutlets import OutletReading, StripReading

    reading = StripReading("strip-a", 640, (OutletReading("spark-01", 1, True, 212),
                                            OutletReading("spark-02", 2, True, 205),
                                            OutletReading("spark-03", 3, False, 0)))
    watchdog = make(FakeRack(strip_reading=reading))
    watchdog.step()
    assert metric(watchdog, "sparkrack_pdu_measured_watts", pdu="strip-a") == 640
    assert metric(watchdog, "sparkrack_pdu_outlet_watts", node="spark-02", outlet="2") == 205
    assert metric(watchdog, "sparkrack_pdu_outlet_on", node="spark-03", outlet="3") == 0
    assert metric(make(FakeRack()), "sparkrack_pdu_measured_watts") is None


def test_the_strip_reader_says_once_why_the_pdu_is_unread_and_forgets_stale_readings(
        tmp_path, caplog, monkeypatch):
    from test_watchdog_install import rehearsal_copy

    from sparkrack.inventory import load_inventory
    from sparkrack.pdu.nodeoutlets import StripReading
    from sparkrack.watchdog import fleetrack as watchdog_rack

    inventory = load_inventory(rehearsal_copy(tmp_path))
    now = [100.0]
    reader = watchdog_rack.StripReader(inventory, clock=lambda: now[0])
    monkeypatch.delenv("SPARKRACK_PDU_AUTH_KEY")
    with caplog.at_level("WARNING", logger="sparkrack.watchdog"):
        for _ in range(3):
            assert reader.read_once(None) is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(
        "strip not read from the PDU: PDU rehearsal-pdu: SPARKRACK_PDU_AUTH_KEY not set (")
    reading = StripReading("rehearsal-pdu", 400, ())
    monkeypatch.setattr(watchdog_rack, "read_strip", lambda inventory, session: reading)
    monkeypatch.setattr(watchdog_rack, "session_of", lambda inventory: "session")
    assert reader.read_once(None) == "session" and reader.latest() == reading
    now[0] += watchdog_rack.STRIP_STALE_S + 1
    assert reader.latest() is None


def test_a_lanes_pace_baselines_are_kept_across_its_starts_and_the_services(tmp_path):
    """The slow-rack baseline of a lane (engine and profile) is written to the state file at
    each poll and given to its next group: a node held back from a start on (a firmware
    power limit survives a reboot) is judged against the lane's pace from before."""
    from sparkrack.watchdog.pace import LEARN_MEASURES, PaceWatch

    paces = []

    class Rack(FakeRack):
        def group_watch(self, ranks, deployment):
            group = super().group_watch(ranks, deployment)
            group.pace = PaceWatch(25, 60)
            paces.append(group.pace)
            return group

    current = deployment("d1")
    rack = Rack(current=current, last_good=current, containers=ranks_of("d1"),
                polls=[healthy("d1")])
    watchdog = make(rack, tmp_path)
    now = [1000.0]
    watchdog.monotonic = lambda: now[0]
    assert watchdog.step().verdict == "guarding"
    paces[0].steps[1] = deque([0.063] * LEARN_MEASURES)
    paces[0].rates.extend([4000.0] * LEARN_MEASURES)
    watchdog.step()  # learned, but written at most once a minute
    saved = json.loads((tmp_path / "state.json").read_text())["paces"]
    assert saved == {"sglang 512k": {"steps": {}, "rate": None}}
    now[0] += 61
    paces[0].steps[1].append(0.064)
    watchdog.step()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["paces"] == {"sglang 512k": {"steps": {"1": 0.063}, "rate": 4000.0}}
    restarted = make(rack, tmp_path)  # the service restarts; the lane starts again (d2)
    rack.current = rack.last_good = deployment("d2")
    rack.containers = ranks_of("d2")
    rack.polls = [healthy("d2")]
    assert restarted.step().verdict == "guarding"
    fresh = paces[-1]
    assert fresh is not paces[0] and fresh.step_baseline() == 0.063
    assert fresh.rate_baseline() == 4000.0 and not fresh.steps  # its own not learned yet
    broken = make(rack, tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"paces": {"sglang 512k": "junk"}}))
    broken._load_state()
    assert broken.paces == {}
