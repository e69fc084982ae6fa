"""The probes of an exported lane, held against the kubelet's rules: a failed liveness probe
restarts the container and, with RecreateGroupOnPodRestart, the whole TP group. Rank 0's
readiness and liveness ask the engine's cheap endpoint, the workers ask no one but
themselves, and a leader whose answers come a few seconds late is not restarted, while one
that stops answering is, within the watchdog's stall budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkrack.engines import build_specs
from sparkrack.export import export_lws, manifest_yaml
from sparkrack.inventory import load_inventory

INVENTORY = Path(__file__).resolve().parents[3] / "inventory" / "rack"
# What an answer costs the engine itself: SGLang's /health sends a one-token generation and
# sleeps a second before it looks for the answer (http_server.py, health_generate); the
# other endpoints answer from the HTTP process.
COST_S = {("sglang", "/health"): 1.0}
QUICK_S = 0.05


@pytest.fixture(scope="module")
def inventory():
    return load_inventory(INVENTORY)


def templates(inventory, engine):
    lane = export_lws(inventory, engine, "512k")
    lws = next(o for o in yaml.safe_load_all(manifest_yaml(lane.objects))
               if o["kind"] == "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    return (group["leaderTemplate"]["spec"]["containers"][0],
            group["workerTemplate"]["spec"]["containers"][0])


def restarted(probe, answer_late, until):
    """When the kubelet restarts the container (None: not before until), probing from 0 on:
    one probe at a time every periodSeconds (one that waits out its timeout delays the
    next), each failing when its answer comes later than timeoutSeconds (None: never);
    failureThreshold failures in a row restart."""
    t, misses = 0.0, 0
    period, timeout = probe["periodSeconds"], probe["timeoutSeconds"]
    while t < until:
        late = answer_late(t)
        failed = late is None or late > timeout
        misses = misses + 1 if failed else 0
        if misses >= probe["failureThreshold"]:
            return t + timeout
        t += max(period, timeout if failed else late)
    return None


def late_by(engine, probe, extra, since=0.0, spell=1e9):
    """Answers to probe's path that come extra seconds late during [since, since + spell)."""
    cost = COST_S.get((engine, probe["httpGet"]["path"]), QUICK_S)
    return lambda t: cost + (extra if since <= t < since + spell else 0.0)


def stalled(engine, probe, since, spell):
    """No answer at all during [since, since + spell): a request then waits until its end."""
    cost = COST_S.get((engine, probe["httpGet"]["path"]), QUICK_S)
    return lambda t: cost + (since + spell - t if since <= t < since + spell else 0.0)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_leader_answering_two_seconds_late_is_not_restarted(inventory, engine):
    """A long prefill keeps the engine busy: every answer comes 2 s late, for as long as the
    watchdog's stall budget. That is a slow server, not a dead one: no group is recreated."""
    leader, _ = templates(inventory, engine)
    budget = build_specs(inventory, engine, "512k")[0].stall_budget_s
    for probe in ("readinessProbe", "livenessProbe"):  # nor taken out of its Service
        assert restarted(leader[probe], late_by(engine, leader[probe], 2.0), budget * 3) is None


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_two_silent_seconds_at_any_moment_restart_nothing(inventory, engine):
    leader, _ = templates(inventory, engine)
    probe = leader["livenessProbe"]
    for tenth in range(0, probe["periodSeconds"] * 10, 5):
        assert restarted(probe, stalled(engine, probe, tenth / 10, 2.0), 600) is None


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_leader_that_stops_answering_is_restarted_within_the_stall_budget(inventory, engine):
    leader, _ = templates(inventory, engine)
    probe = leader["livenessProbe"]
    budget = build_specs(inventory, engine, "512k")[0].stall_budget_s
    when = restarted(probe, lambda t: None if t >= 100 else QUICK_S, 1000)
    assert 100 + budget - probe["periodSeconds"] <= when <= 100 + budget + probe["periodSeconds"]


def test_each_probe_asks_what_is_cheap_and_no_worker_asks_the_leader(inventory):
    sglang_leader, sglang_worker = templates(inventory, "sglang")
    vllm_leader, vllm_worker = templates(inventory, "vllm")
    paths = {probe: sglang_leader[probe]["httpGet"]
             for probe in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert paths == {"startupProbe": {"path": "/health", "port": "http"},  # 503 until it is up
                     "readinessProbe": {"path": "/v1/models", "port": "http"},
                     "livenessProbe": {"path": "/v1/models", "port": "http"}}
    assert {vllm_leader[p]["httpGet"]["path"] for p in paths} == {"/health"}
    assert sglang_worker["startupProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert sglang_worker["livenessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert "readinessProbe" not in sglang_worker
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(vllm_worker)  # headless
    for container in (sglang_leader, sglang_worker, vllm_leader):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert "exec" not in container.get(probe, {})
    startup = sglang_leader["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900  # ready_timeout_s
