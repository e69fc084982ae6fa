"""The watchdog's metrics as Prometheus reads them, and the shipped alert rules: `promtool
check rules` and `promtool test rules` (Debian's prometheus package, installed by the suite
when missing: tests/hosttools.py). The scrape config: tests/unit/monitoring/test_render.py."""

from __future__ import annotations

import re
import subprocess
from collections import deque
from pathlib import Path

import pytest
import yaml
from hosttools import need
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparkrack.watchdog.metrics import (
    ACTIONS,
    RANK_STATES,
    DeploymentInfo,
    NodeSnapshot,
    Snapshot,
    WatchdogMetrics,
    update,
)

REPO = Path(__file__).resolve().parents[3]
PROMETHEUS = REPO / "deploy" / "prometheus"


def samples(metrics: WatchdogMetrics) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


GIB = 1 << 30
from sparkrack.pdu.nodeoutlets import OutletReading, StripReading  # noqa: E402
from sparkrack.watchdog.pace import LEARN_MEASURES, PaceWatch, Slow  # noqa: E402

FULL = Snapshot(
    nodes=(NodeSnapshot("spark-01", 0, True, sm_clock_mhz=2190, gpu_power_watts=96.5,
                        gpu_util_pct=100, temperature_c=95, slowdown_c=97, shutdown_c=100,
                        over_cap=False, latched=True,
                        mem_available_bytes=100 * GIB, mem_total_bytes=128 * GIB,
                        cap_unit_ok=True, cap_verified=True, cap_verified_time=1.7e9,
                        rank_state="running"),
           NodeSnapshot("spark-02", 1, True, sm_clock_mhz=2450, gpu_power_watts=120.0,
                        mem_available_bytes=90 * GIB, mem_total_bytes=128 * GIB,
                        cap_unit_ok=False, cap_verified=False, rank_state="exited",
                        memory_ratchet=True),
           NodeSnapshot("spark-03", 2, False, rank_state="unreachable")),
    deployment=DeploymentInfo("sglang", "512k", "lmsysorg/sglang:v0.5.22-cu130", "sha256:abc",
                              "sglang-512k-20260101-000000-beef"),
    deployment_ready=True, guarding=True, ranks_expected=3, ranks_running=1,
    rank0_healthy=True, projected_watts=1471, strip_watts=1440, margin_watts=100,
    poll_time=1.7e9 + 5, poll_seconds=0.25, detection_to_stopped_seconds=1.5,
    no_progress_seconds=12.0, stalled=("spark-02", 1),
    strip=StripReading("strip-a", 420, (OutletReading("spark-01", 1, True, 212),)))


def test_a_scrape_shows_the_snapshot_with_units_in_base_units():
    metrics = WatchdogMetrics()
    update(metrics, FULL)
    got = samples(metrics)
    one, two, three = (("node", "spark-01"), ("rank", "0")), (("node", "spark-02"), ("rank", "1")), \
        (("node", "spark-03"), ("rank", "2"))
    assert got["sparkrack_node_up", one] == 1 and got["sparkrack_node_up", three] == 0
    assert got["sparkrack_gpu_sm_clock_hertz", one] == 2.19e9
    assert got["sparkrack_gpu_power_watts", two] == 120.0
    assert got["sparkrack_gpu_utilization_ratio", one] == 1.0
    assert got["sparkrack_gpu_temperature_celsius", one] == 95
    assert got["sparkrack_gpu_slowdown_temperature_celsius", one] == 97
    assert got["sparkrack_gpu_shutdown_temperature_celsius", one] == 100
    assert got["sparkrack_gpu_over_cap", one] == 0 and got["sparkrack_gpu_latched", one] == 1
    assert ("sparkrack_gpu_latched", two) not in got  # not judged: absent, not 0
    assert got["sparkrack_node_memory_available_bytes", one] == 100 * GIB
    assert got["sparkrack_clock_cap_unit_ok", two] == 0
    assert got["sparkrack_clock_cap_verified", one] == 1
    assert got["sparkrack_clock_cap_verified_timestamp_seconds", one] == 1.7e9
    assert ("sparkrack_clock_cap_verified_timestamp_seconds", two) not in got  # never verified
    assert ("sparkrack_gpu_sm_clock_hertz", three) not in got  # unknown, not 0
    assert got["sparkrack_memory_ratchet", two] == 1
    for state in RANK_STATES:
        assert got["sparkrack_rank_container_state", (*two, ("state", state))] == (
            state == "exited")
    assert got["sparkrack_rank_container_state", (*three, ("state", "unreachable"))] == 1
    assert got["sparkrack_deployment_info", (
        ("deployment", "sglang-512k-20260101-000000-beef"), ("engine", "sglang"),
        ("image", "lmsysorg/sglang:v0.5.22-cu130"), ("image_id", "sha256:abc"),
        ("profile", "512k"))] == 1
    rack = {name: value for (name, labels), value in got.items() if not labels}
    assert {k: v for k, v in rack.items() if not k.endswith("_created")} == {
        "sparkrack_deployment_current": 1, "sparkrack_deployment_ready": 1,
        "sparkrack_group_ranks_expected": 3, "sparkrack_group_ranks_running": 1,
        "sparkrack_rank0_healthy": 1, "sparkrack_power_projected_watts": 1471,
        "sparkrack_power_strip_watts": 1440, "sparkrack_power_margin_watts": 100,
        "sparkrack_watchdog_guarding": 1, "sparkrack_watchdog_stepped_aside": 0,
        "sparkrack_watchdog_last_poll_timestamp_seconds": 1.7e9 + 5,
        "sparkrack_watchdog_poll_duration_seconds": 0.25,
        "sparkrack_watchdog_detection_to_stopped_seconds": 1.5,
        "sparkrack_group_no_progress_seconds": 12.0, "sparkrack_watchdog_blind": 0,
        "sparkrack_watchdog_stalls_total": 0}
    assert got["sparkrack_group_stalled", two] == 1


def test_counters_start_at_zero_and_count_actions():
    metrics = WatchdogMetrics()
    assert {samples(metrics)["sparkrack_watchdog_actions_total", (("action", a),)]
            for a in ACTIONS} == {0}
    metrics.count_action("stop")
    metrics.count_action("stop")
    metrics.count_ratchet_warning("spark-02")
    metrics.count_stall()
    metrics.count_cap_reapplied("spark-04", took=True)
    got = samples(metrics)
    assert got["sparkrack_watchdog_cap_reapplied_total",
               (("node", "spark-04"), ("outcome", "took"))] == 1
    assert got["sparkrack_watchdog_stalls_total", ()] == 1
    assert got["sparkrack_watchdog_actions_total", (("action", "stop"),)] == 2
    assert got["sparkrack_watchdog_memory_ratchet_warnings_total", (("node", "spark-02"),)] == 1
    with pytest.raises(ValueError):
        metrics.count_action("reboot")


def test_no_deployment_shows_no_info_and_no_rank_states():
    metrics = WatchdogMetrics()
    update(metrics, Snapshot(nodes=(NodeSnapshot("spark-01", 0, True),)))
    names = {name for name, _ in samples(metrics)}
    assert "sparkrack_deployment_info" not in names
    assert "sparkrack_rank_container_state" not in names
    assert samples(metrics)["sparkrack_deployment_current", ()] == 0
    assert "sparkrack_group_stalled" not in names  # no stall: no series


def slow_pace() -> PaceWatch:
    """A group's pace, measured, with a baseline, found serving slower (pace.py)."""
    pace = PaceWatch(25, 60)
    pace.step_s, pace.rate = 0.094, 2500.0
    pace.steps[1] = deque([0.063] * LEARN_MEASURES)
    pace.rates.extend([4000.0] * LEARN_MEASURES)
    pace.slow = Slow(60, 25, 0.094, 0.063, None, None, "spark-05", "SM clock 1,485 MHz")
    return pace


def exported_names() -> set[str]:
    metrics = WatchdogMetrics()
    metrics.pace_of = slow_pace
    update(metrics, FULL)
    metrics.count_ratchet_warning("spark-01")
    metrics.count_cap_reapplied("spark-01", took=False)
    return {name for name, _ in samples(metrics)}


def test_the_guarded_groups_pace_is_scraped_with_the_node_that_slows_it():
    metrics = WatchdogMetrics()
    text = generate_latest(metrics.registry).decode()
    assert "sparkrack_serving_slower" not in text  # no group guarded
    metrics.pace_of = slow_pace
    text = generate_latest(metrics.registry).decode()
    assert 'sparkrack_serving_slower{node="spark-05"} 1.0' in text
    assert "sparkrack_decode_step_seconds 0.094" in text
    assert "sparkrack_decode_step_baseline_seconds 0.063" in text
    assert "sparkrack_prefill_baseline_tokens_per_second 4000.0" in text
    healthy = PaceWatch(25, 60)
    metrics.pace_of = lambda: healthy
    text = generate_latest(metrics.registry).decode()
    assert 'sparkrack_serving_slower{node=""} 0.0' in text
    assert "sparkrack_decode_step_seconds" not in text  # nothing measured yet


def test_every_metric_the_alerts_use_is_exported():
    rules = yaml.safe_load((PROMETHEUS / "sparkrack-alerts.yml").read_text())
    used = {name for group in rules["groups"] for rule in group["rules"]
            for name in re.findall(r"\bsparkrack_[a-z0-9_]+", rule["expr"])}
    assert used and used <= exported_names()


def test_the_watchdog_page_names_every_metric():
    page = (REPO / "docs" / "watchdog.md").read_text()
    missing = sorted(name for name in exported_names()
                     if not name.endswith("_created") and f"`{name}`" not in page)
    assert not missing, f"docs/watchdog.md 'Metrics' does not name {missing}"


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need("promtool"), *args], cwd=PROMETHEUS, capture_output=True, text=True,
                          timeout=60)


def test_promtool_accepts_the_alert_rules():
    done = promtool("check", "rules", "sparkrack-alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 19 rules found" in done.stdout


def test_alerts_fire_on_synthetic_series():
    """group down, node unreachable, memory ratchet, power over / inside the margin, cap
    not verified since boot, cap lost (and re-applied), GPU latched, hot, overheating: each
    fires after its `for:` and not before."""
    done = promtool("test", "rules", "sparkrack-alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_latency_alerts_fire_on_the_engines_histograms():
    """SparkrackTtftHigh and SparkrackInterTokenLatencyHigh: the p95 of vLLM's and SGLang's
    own histograms, a slow rank 0 fires after its `for:`, a fast one never."""
    done = promtool("test", "rules", "sparkrack-engine-alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
