"""The watchdog service's power cycles with a fake rack (issue 53 item 2): a latch acted on
only after watchdog_power_cycle_samples consecutive polls and never when heat explains the
low clock; at most one cycle per node per window, kept on disk across restarts, what is
held back said (log, state file, metrics); a cycle of its own node finished by the service
started again after the boot, or refused up front saying why."""

from __future__ import annotations

import json
import logging

import pytest
from fakerack import (
    FakeRack,
    PowerGone,
    deployment,
    guarded,
    healthy,
    latched_poll,
    make,
    metric,
    ranks_of,
)

from sparkrack.facts.gpu import GpuSample, Thermal
from sparkrack.watchdog.status import parse_state

SAMPLES = 5  # watchdog_power_cycle_samples' default


def steps(watchdog, count: int) -> list[str]:
    return [watchdog.step().verdict for _ in range(count)]


def said(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_the_flapping_latch_is_cycled_once_then_held_back_and_said(tmp_path, caplog):
    """The reproduction: a latch that comes back after each restart. Before, each new
    deployment was cycled again, three times within the restart budget."""
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path,
                             allow_power_cycle=True)
    rack.relatch = True
    with caplog.at_level(logging.INFO, logger="sparkrack.watchdog"):
        verdicts = steps(watchdog, 30)
    assert rack.cycles == ["spark-03"], rack.cycles
    assert verdicts[:SAMPLES] == ["guarding"] * (SAMPLES - 1) + ["power-cycled"]
    assert set(verdicts[SAMPLES:]) == {"guarding"}  # the new group guarded, slow but serving
    held = said(caplog, "power cycle held back")
    assert len(held) == 1, held
    assert held[0].startswith("spark-03: GPU latched in its low-clock state for 5 polls; "
                              "power cycle held back: power-cycled ")
    assert "at most one cycle per node in 1440 min" in held[0]
    assert metric(watchdog, "sparkrack_watchdog_power_cycles_held_total", node="spark-03",
                  reason="window") == 1
    assert metric(watchdog, "sparkrack_watchdog_power_cycle_held", node="spark-03",
                  cause="latched", reason="window") == 1
    assert metric(watchdog, "sparkrack_watchdog_power_cycle_timestamp_seconds",
                  node="spark-03", cause="latched", outcome="ok") is not None
    state = json.loads((tmp_path / "state.json").read_text())
    cycles = state["power_cycles"]
    assert [e["outcome"] for e in cycles["nodes"]["spark-03"]] == ["ok"]
    assert cycles["nodes"]["spark-03"][0]["restarted"] == "d1-again"
    assert cycles["held"]["spark-03 latched"]["kind"] == "window"
    assert cycles["pending"] is None
    # the service restarted (a new deployment, a new process): still held back, not cycled
    again = make(rack, tmp_path, allow_power_cycle=True)
    with caplog.at_level(logging.INFO, logger="sparkrack.watchdog"):
        steps(again, 10)
    assert rack.cycles == ["spark-03"]
    assert len(said(caplog, "power cycle held back")) == 2  # said once by each process
    verdicts_, _, _, error = parse_state((tmp_path / "state.json").read_bytes())
    assert error == "" and verdicts_


def test_a_latch_is_acted_on_only_after_enough_consecutive_polls(tmp_path):
    """One busy low-clock reading (a clock caught as it changes) cycled the node at once."""
    blips = [healthy("d1")] + ([latched_poll("d1")] * (SAMPLES - 1) + [healthy("d1")]) * 3
    rack, watchdog = guarded(blips + [latched_poll("d1")], tmp_path, allow_power_cycle=True)
    verdicts = steps(watchdog, len(blips) - 1)
    assert rack.cycles == [] and set(verdicts) == {"guarding"}
    assert steps(watchdog, SAMPLES)[-1] == "power-cycled" and rack.cycles == ["spark-03"]


@pytest.mark.parametrize("sample, thermal", [
    (GpuSample(100, 9.5, 620, 99, -4, 0x48), Thermal(97, 100)),  # HW thermal slowdown
    (GpuSample(100, 12.1, 740, 95, 0, 0x20), Thermal(97, 100)),  # SW thermal, at T.Limit
    (GpuSample(100, 12.1, 740, 95, 0), Thermal()),  # no reasons read: at its T.Limit
    (GpuSample(100, 9.5, 620, 98), Thermal(97, 100)),  # past its slowdown temperature
])
def test_a_gpu_slowed_by_its_heat_is_never_cycled(tmp_path, caplog, sample, thermal):
    hot = latched_poll("d1", sample=sample, thermal=thermal)
    rack, watchdog = guarded([healthy("d1"), hot], tmp_path, allow_power_cycle=True)
    with caplog.at_level(logging.WARNING, logger="sparkrack.watchdog"):
        assert set(steps(watchdog, 4 * SAMPLES)) == {"guarding"}
    assert rack.cycles == []
    assert metric(watchdog, "sparkrack_gpu_latched", node="spark-03") == 0
    [line] = said(caplog, "spark-03: GPU held at")
    assert "its heat, not a latch (a power cycle would not help)" in line


def test_a_cycle_of_its_own_node_is_finished_by_the_service_after_the_boot(tmp_path, caplog):
    """The head (spark-01, where the watchdog runs) latched: the pending restart is on disk
    before the cut; the service started again at boot finishes it (the node, the group
    started again), says so, and shows it in its state and metrics."""
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1", node="spark-01")], tmp_path,
                             allow_power_cycle=True)
    steps(watchdog, SAMPLES - 1)
    with pytest.raises(PowerGone):
        watchdog.step()
    state = json.loads((tmp_path / "state.json").read_text())
    pending = state["power_cycles"]["pending"]
    assert (pending["node"], pending["engine"], pending["profile"], pending["deployment"]) == (
        "spark-01", "sglang", "512k", "d1")
    # the boot: systemd starts the service again, which finds the cycle to finish
    booted = make(rack, tmp_path, allow_power_cycle=True)
    with caplog.at_level(logging.INFO, logger="sparkrack.watchdog"):
        step = booted.step()
    assert (step.verdict, step.acted) == ("power-cycled", True)
    assert step.detail == ("spark-01: back, cap unit active this boot, burn ok; sglang 512k "
                           "started again in order")
    assert rack.finished == ["spark-01"] and rack.restarts == ["d1"]
    assert said(caplog, "resuming the power cycle of spark-01 (latched), outlet pdu:3 cut; "
                "sglang 512k to start again")
    cycles = json.loads((tmp_path / "state.json").read_text())["power_cycles"]
    assert cycles["pending"] is None
    entry = cycles["nodes"]["spark-01"][0]
    assert (entry["outcome"], entry["deployment"], entry["restarted"]) == ("ok", "d1",
                                                                          "d1-again")
    assert metric(booted, "sparkrack_watchdog_actions_total", action="power_cycle") == 1
    assert metric(booted, "sparkrack_watchdog_actions_total", action="restart") == 1
    assert metric(booted, "sparkrack_watchdog_power_cycle_timestamp_seconds", node="spark-01",
                  cause="latched", outcome="ok") == pytest.approx(pending["decided"])
    assert booted.step().verdict == "guarding"  # the group started again, guarded anew
    assert rack.finished == ["spark-01"]  # once


def test_a_cycle_of_its_own_node_that_could_not_be_finished_is_refused_up_front(tmp_path,
                                                                                 caplog):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1", node="spark-01")], tmp_path,
                             allow_power_cycle=True,
                             keeps="it does not run as a systemd unit (watch.install's): "
                                   "nothing starts it again")
    with caplog.at_level(logging.WARNING, logger="sparkrack.watchdog"):
        assert set(steps(watchdog, 3 * SAMPLES)) == {"guarding"}
    assert rack.cycles == [] and rack.kept == []
    assert said(caplog, "held back") == [
        "spark-01: GPU latched in its low-clock state for 5 polls; power cycle held back: "
        "spark-01 is the watchdog's own node and it does not run as a systemd unit "
        "(watch.install's): nothing starts it again: the group would not be started again "
        "after the boot"]
    assert metric(watchdog, "sparkrack_watchdog_power_cycles_held_total", node="spark-01",
                  reason="refused") == 1


def test_without_its_node_the_service_cycles_nothing(tmp_path, caplog):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path,
                             allow_power_cycle=True, node=None)
    with caplog.at_level(logging.WARNING, logger="sparkrack.watchdog"):
        steps(watchdog, 2 * SAMPLES)
    assert rack.cycles == []
    assert "does not know which node it runs on (no --node)" in said(caplog, "held back")[0]


def test_not_allowed_a_latched_node_is_only_reported(tmp_path):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path)
    assert set(steps(watchdog, 3 * SAMPLES)) == {"guarding"}
    assert rack.cycles == [] and rack.restarts == []
    assert metric(watchdog, "sparkrack_gpu_latched", node="spark-03") == 1
    assert metric(watchdog, "sparkrack_watchdog_power_cycles_held_total") is None


def test_a_spent_budget_holds_a_latched_node_back_and_says_so(caplog):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], allow_power_cycle=True)
    watchdog.budget.budget = 0
    with caplog.at_level(logging.WARNING, logger="sparkrack.watchdog"):
        assert set(steps(watchdog, 3 * SAMPLES)) == {"guarding"}
    assert rack.cycles == []
    assert said(caplog, "held back") == [
        "spark-03: GPU latched in its low-clock state for 5 polls; power cycle held back: "
        "restart budget spent (0 of 0 in 30 min): not power-cycled; `invoke power-cycle -n "
        "NODE`"]


def test_a_failed_power_cycle_is_not_tried_again_within_the_window(tmp_path):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path,
                             allow_power_cycle=True)
    rack.cycle_ok = False
    verdicts = steps(watchdog, SAMPLES)
    assert verdicts[-1] == "power-cycle-failed"
    assert watchdog.last.detail == "spark-03: power cycle failed: the PDU refused"
    rack.current = rack.last_good = deployment("d2")  # the operator started it again
    rack.containers = ranks_of("d2")
    rack.polls = [latched_poll("d2")]
    assert set(steps(watchdog, 3 * SAMPLES)) == {"guarding"}
    assert rack.cycles == ["spark-03"] and rack.restarts == []
    assert metric(watchdog, "sparkrack_watchdog_actions_total",
                  action="power_cycle_failed") == 1
    assert metric(watchdog, "sparkrack_watchdog_power_cycle_timestamp_seconds",
                  node="spark-03", cause="latched", outcome="failed") is not None


def test_a_start_that_fails_after_the_cycle_leaves_the_group_down(tmp_path):
    from sparkrack.core.errors import SparkrackError

    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path,
                             allow_power_cycle=True)
    rack.restart_error = SparkrackError("sglang 512k refused: burn: spark-03 LATCHED")
    assert steps(watchdog, SAMPLES)[-1] == "restart-failed"
    assert watchdog.last.detail.endswith("; the start after it failed: sglang 512k refused: "
                                         "burn: spark-03 LATCHED")
    assert metric(watchdog, "sparkrack_watchdog_actions_total", action="restart_failed") == 1
    assert watchdog.step().verdict == "idle"  # `down` cleared the records before the cut


def test_the_rack_is_left_alone_while_an_operator_holds_the_lock(tmp_path):
    rack, watchdog = guarded([healthy("d1"), latched_poll("d1")], tmp_path,
                             allow_power_cycle=True)
    rack.holder = "alice@laptop (pid 42) running `roll`"
    assert set(steps(watchdog, 2 * SAMPLES)) == {"stepped-aside"}
    assert rack.cycles == [] and FakeRack().cycles == []
