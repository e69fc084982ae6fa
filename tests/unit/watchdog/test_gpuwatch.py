"""Each poll's GPU reading judged on its own (watchdog/gpuwatch.py), the thresholds and the
sample as nvidia-smi gives them (facts/gpu.py), and the cap unit's restart read back
(watchdog/capguard.py): pure, no node."""

from __future__ import annotations

import pytest

from sparkrack.facts.gpu import GpuSample, Thermal, parse_thermal
from sparkrack.watchdog.capguard import judge_restart
from sparkrack.watchdog.gpuwatch import judge

GB10 = Thermal(slowdown_c=97, shutdown_c=100)


def kinds(gpu: GpuSample, thermal: Thermal | None = GB10) -> list[str]:
    return [f.kind for f in judge("spark-04", 3, gpu, 2200, thermal)]


def test_a_busy_gpu_over_the_cap_has_lost_its_lock():
    [finding] = judge("spark-04", 3, GpuSample(100, 86.5, 2454, 82), 2200, GB10)
    assert finding.kind == "over-cap" and finding.evidence["cap_mhz"] == 2200
    assert finding.line.startswith("spark-04: GPU at 2454 MHz under load (100 %), above the "
                                   "2200 MHz cap: its clock lock was lost")
    assert kinds(GpuSample(0, 3.9, 2454, 36)) == []  # idle: no load, nothing proven
    assert kinds(GpuSample(100, 67.3, 2187, 71)) == []  # capped


def test_a_latched_gpu_under_load_is_reported_with_its_node_and_the_fix():
    [finding] = judge("spark-04", 3, GpuSample(100, 10.8, 670, 40), 2200, GB10)
    assert finding.kind == "latched" and (finding.node, finding.rank) == ("spark-04", 3)
    assert finding.evidence == {"sm_mhz": 670, "power_w": 10.8, "util": 100,
                                "temperature_c": 40, "event_reasons": None}
    assert "only a full power removal clears it: power spark-04 off at the wall" in finding.line
    assert "invoke burn --limit spark-04" in finding.line
    assert kinds(GpuSample(0, 3.9, 208, 36)) == []  # idle at its idle clock: not latched


def test_the_temperature_is_judged_against_the_gpus_own_thresholds():
    assert kinds(GpuSample(100, 67.3, 2187, 91)) == []
    assert kinds(GpuSample(100, 38.2, 1674, 95)) == ["hot"]  # 2 C below its slowdown
    assert kinds(GpuSample(100, 16.8, 1093, 98)) == ["overheating"]
    assert kinds(GpuSample(100, 16.8, 1093, 98), Thermal(None, 100)) == ["overheating"]
    assert kinds(GpuSample(100, 16.8, 1093, 98), Thermal()) == []  # N/A: nothing to judge
    [hot] = judge("spark-05", 4, GpuSample(100, 38.2, 1674, 95), 2200, GB10)
    assert hot.line.startswith("spark-05: GPU at 95 C, 2 C below its slowdown temperature "
                               "(slowdown 97 C; shutdown 100 C)")


HOT_CLOCK = dict(util=100, power_w=9.5, sm_mhz=620)  # busy under 1,000 MHz


@pytest.mark.parametrize("sample, thermal, kinds_found, excuse", [
    # nothing explains the low clock: latched
    (GpuSample(**HOT_CLOCK, temperature_c=48, margin_c=47, event_reasons=0x0), GB10,
     ["latched"], None),
    (GpuSample(**HOT_CLOCK, temperature_c=48), Thermal(), ["latched"], None),  # none reported
    # the driver says the GPU slows itself for heat: never latched
    (GpuSample(**HOT_CLOCK, temperature_c=93, margin_c=2, event_reasons=0x20), GB10,
     ["overheating"], "its SW thermal slowdown at 93 C"),
    (GpuSample(**HOT_CLOCK, temperature_c=99, margin_c=-4, event_reasons=0x48), GB10,
     ["overheating"], "its HW thermal slowdown at 99 C"),
    (GpuSample(**HOT_CLOCK, temperature_c=99, event_reasons=0x60), Thermal(),
     ["overheating"], "its HW thermal slowdown and SW thermal slowdown at 99 C"),
    # no reasons reported, but the temperature is at its limit
    (GpuSample(**HOT_CLOCK, temperature_c=95, margin_c=0), Thermal(), ["overheating"],
     "its temperature at its T.Limit at 95 C (margin 0 C)"),
    (GpuSample(**HOT_CLOCK, temperature_c=98), GB10, ["overheating"],
     "its temperature past its slowdown temperature (97 C) at 98 C"),
    # hot but below its limits, nothing reported active: the low clock is not heat's
    (GpuSample(**HOT_CLOCK, temperature_c=93, margin_c=2, event_reasons=0x0), GB10,
     ["latched", "hot"], None),
    # power capping or a clock setting is no thermal reason
    (GpuSample(**HOT_CLOCK, temperature_c=60, margin_c=35, event_reasons=0x6), GB10,
     ["latched"], None),
])
def test_a_low_clock_that_heat_explains_is_overheating_never_latched(sample, thermal,
                                                                    kinds_found, excuse):
    """Issue 53: a GPU slowing itself at its heat limit read as latched (and was cycled).
    The driver's clock event reasons (NVML: SW thermal 0x20, HW thermal 0x40), the
    T.Limit margin or the slowdown temperature explain a busy low clock: overheating."""
    from sparkrack.watchdog.gpuwatch import thermal_excuse

    found = judge("spark-05", 4, sample, 2200, thermal)
    assert [f.kind for f in found] == kinds_found
    assert thermal_excuse(sample, thermal) == excuse
    if excuse:
        assert found[0].line == (f"spark-05: GPU held at 620 MHz under load (100 %) by "
                                 f"{excuse}: its heat, not a latch (a power cycle would not "
                                 "help); check its airflow (vents, dust, the room) and what "
                                 "it runs")
        assert found[0].evidence["excuse"] == excuse


def test_the_clock_event_reasons_are_read_from_the_sample_line():
    """`clocks_event_reasons.active` as driver 580 prints it with nounits (a public H200
    capture: 0x0000000000000001); an older driver's line without the optional fields."""
    from sparkrack.facts.gpu import SAMPLE, parse_sample
    from sparkrack.facts.queries import answer

    def sample(line: str) -> GpuSample:
        return parse_sample(answer(f"@@base\n@@0 g\ngpu 0 {line}\n", [SAMPLE]))

    hot = sample("620, 9.50, 95, 100, 0, 0x0000000000000020")
    assert (hot.sm_mhz, hot.margin_c, hot.event_reasons) == (620, 0, 0x20)
    assert hot.thermal_slowdown == "SW thermal slowdown"
    assert sample("620, 9.50, 95, 100, 0, [N/A]").event_reasons is None
    old = sample("2187, 67.30, 71, 100")
    assert (old.sm_mhz, old.margin_c, old.event_reasons) == (2187, None, None)


def test_thresholds_read_from_either_driver_label_form():
    """R535 and later print offsets from the T.Limit (GB10, driver 580: margin 57 C at 38 C,
    shutdown -5 C, slowdown -2 C); older drivers print temperatures; 615 adds
    'Specification'; N/A stays unknown."""
    gb10 = ["GPU Current Temp: 38 C", "GPU T.Limit Temp: 57 C",
            "GPU Shutdown T.Limit Temp: -5 C", "GPU Slowdown T.Limit Temp: -2 C",
            "GPU Max Operating T.Limit Temp: N/A", "GPU Target Temperature: N/A"]
    assert parse_thermal(gb10) == Thermal(97, 100)
    older = ["GPU Current Temp: 28 C", "GPU Shutdown Temp: 92 C", "GPU Slowdown Temp: 89 C",
             "GPU Max Operating Temp: 85 C"]
    assert parse_thermal(older) == Thermal(89, 92)
    newest = ["GPU Current Temp: 40 C", "GPU Current T.Limit Temp: 47 C",
              "GPU Shutdown T.Limit Temp Specification: -12 C",
              "GPU Slowdown T.Limit Temp Specification: -2 C"]
    assert parse_thermal(newest) == Thermal(89, 99)
    unknown = parse_thermal(["GPU Current Temp: 38 C", "GPU T.Limit Temp: N/A",
                             "GPU Shutdown T.Limit Temp: -5 C"])
    assert unknown == Thermal() and not unknown.known


def test_the_cap_took_when_the_unit_succeeded_and_the_clock_is_under_it():
    took = judge_restart("spark-04", 2200, "ok", "ActiveState=active\nResult=success\n2187, 100\n")
    assert took.took and took.unit == "active/success" and (took.sm_mhz, took.util) == (2187, 100)
    assert took.line == ("spark-04: clock cap re-applied (sparkrack-clock-cap.service "
                         "restarted, active/success): GPU at 2187 MHz at 100 %, under the 2200 "
                         "MHz cap")
    failed = judge_restart("spark-04", 2200, "ok",
                           "ActiveState=failed\nResult=exit-code\n2454, 100\n")
    assert not failed.took and "the clock cap did not take" in failed.line
    assert not judge_restart("spark-04", 2200, "ok",
                             "ActiveState=active\nResult=success\n2454, 100\n").took
    lost = judge_restart("spark-04", 2200, "unreachable", "", "stopped answering")
    assert not lost.took and lost.line.endswith("stopped answering")


def test_the_polls_round_trip_reads_the_sample_and_the_thresholds_from_nvidia_smi(tmp_path,
                                                                                  monkeypatch):
    """gather.py's `g` and `t` sections against the simulated GB10's nvidia-smi (a gpusimd
    of this test's own): the reading and the memory in one trip, the thresholds too."""
    import json
    import os
    import re
    import subprocess
    import time
    from pathlib import Path

    from sparkrack.facts.gpu import SAMPLE, THERMAL, parse_sample, sample_memory
    from sparkrack.facts.queries import answer, argv

    sim = Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim"
    config = tmp_path / "node.json"
    config.write_text(json.dumps({"node": "spark-04", "port": 0, "state_dir": str(tmp_path),
                                  "latch_file": str(tmp_path / "latched"),
                                  "heat_file": str(tmp_path / "heat")}))
    log = tmp_path / "gpusimd.log"
    with open(log, "w") as err:
        daemon = subprocess.Popen([str(sim / "gpusim" / "gpusimd")], stderr=err,
                                  env={**os.environ, "GPU_SIM_CONFIG": str(config)})
    try:
        deadline = time.monotonic() + 5
        while not (port := re.search(r"127\.0\.0\.1:(\d+)", log.read_text())):
            assert time.monotonic() < deadline and daemon.poll() is None, log.read_text()
            time.sleep(0.02)
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "nvidia-smi").symlink_to(sim / "nvsmi" / "nvidia-smi")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        monkeypatch.setenv("GPU_SIM_ADDR", f"127.0.0.1:{port.group(1)}")
        done = subprocess.run(argv([SAMPLE, THERMAL]), capture_output=True, text=True,
                              timeout=30)
        answers = answer(done.stdout, [SAMPLE, THERMAL])
        sample = parse_sample(answers)
        assert sample.util == 0 and sample.sm_mhz == 208 and sample.power_w == 3.9
        assert sample.temperature_c + sample.margin_c == 95
        assert sample.event_reasons == 0x1 and sample.thermal_slowdown is None  # idle
        assert sample_memory(answers)[0] > 0
        assert parse_thermal(answers.lines(THERMAL)) == Thermal(97, 100)
    finally:
        daemon.terminate()
        daemon.wait(5)


def test_a_lost_cap_is_re_applied_at_most_every_30_s_and_each_finding_said_once(monkeypatch):
    from types import SimpleNamespace

    from sparkrack.deployments.ranks import Rank
    from sparkrack.watchdog import watch
    from sparkrack.watchdog.capguard import Reapplied

    calls = []

    def reapply(fleet, inventory, finding, by):
        calls.append((finding.node, by))
        return Reapplied(finding.node, True, f"{finding.node}: clock cap re-applied", "ok")

    monkeypatch.setattr(watch, "reapply_cap", reapply)
    inventory = SimpleNamespace(vars=SimpleNamespace(clock_cap_mhz=2200, watchdog_slow_percent=25,
                                                   watchdog_slow_for_s=300))
    ranks = [Rank("spark-04", 3, "r3", "vllm", "512k", "d", "running", None, 0)]
    group = watch.GroupWatch(None, inventory, ranks, http_port=1, health_path="/health")
    over = judge("spark-04", 3, GpuSample(100, 86.5, 2454, 82), 2200)
    standing: set = set()
    lines, made = watch.tend_gpus(group, watch.Poll(findings=over), standing, "watchdog")
    assert lines == [f"warning: {over[0].line}", "spark-04: clock cap re-applied"]
    assert [done.took for done in made] == [True]
    assert watch.tend_gpus(group, watch.Poll(findings=over), standing, "watchdog") == ([], [])
    assert calls == [("spark-04", "watchdog")]  # not again within REAPPLY_EVERY_S
    assert watch.tend_gpus(group, watch.Poll(), standing, "watchdog") == ([], [])
    assert not standing
