"""Wedged, not dead (issue 25): `invoke watch` on the rehearsal rack finds a TP group that
stops making progress while every process lives, names the rank whose GPU stands out, and
writes its evidence to the audit log; a long prefill that keeps every GPU busy is left alone.

The stub's fault `wedge_above_tokens` makes rank 3 (spark-04) hang in the forward of a long
prompt: it never answers the group again and its simulated GPU reads ~96 % busy at ~20 W
while its peers wait in the collective at full power (vllm#42354's pattern). vLLM's
/health stays 200 (it answers 503 only once the engine has errored), so only progress shows
it; SGLang's /health (a generation) goes red, and the watch names the rank all the same.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from provision_helpers import inventory_copy
from stubgroup import nothing_runs, quick_burn

from sparkrack.engines import build_specs
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import engine as lifecycle
from sparkrack.lifecycle.headapi import Endpoint
from sparkrack.oplock.audit import parse_lines
from sparkrack.oplock.remote import AUDIT_FILE
from sparkrack.rehearsal.stub.modeldir import write_stub_model

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
WEDGE_ABOVE = 400  # words: a longer prompt wedges rank 3
LONG_PROMPT = 600


def watching(inventory, duration: float):
    """Run lifecycle.watch_group in a thread: (thread, result, events, started, broken)."""
    result, events = {}, []
    started, broken = threading.Event(), threading.Event()

    def on_event(line):
        events.append((time.monotonic(), line))
        (broken if line.startswith("group broken") else started).set()

    thread = threading.Thread(target=lambda: result.update(report=lifecycle.watch_group(
        inventory, burn=quick_burn, duration=duration, interval=1.0, on_event=on_event)))
    thread.start()
    assert started.wait(60), events
    return thread, result, events, broken


def send(inventory, words: int, max_tokens: int = 8) -> threading.Thread:
    """A chat request to rank 0 in a thread (it may never be answered: errors are ignored)."""
    def ask():
        try:
            Endpoint(inventory.head, 30000 if lifecycle_engine(inventory) == "sglang" else 8000,
                     "GLM-5.3").chat([{"role": "user", "content": "word " * words}], max_tokens,
                                     timeout=120)
        except Exception:  # noqa: BLE001 - a wedged or stopped group drops it
            pass
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def lifecycle_engine(inventory) -> str:
    return nothing_runs(inventory)[0].engine


def head_audit(inventory) -> list[dict]:
    with Fleet(inventory, [inventory.head]) as fleet:
        done = fleet.run(["cat", AUDIT_FILE])[inventory.head.name]
    assert done.ok, done.error
    return parse_lines(done.stdout)


@pytest.fixture
def stall_rack(engine_rack, tmp_path):
    """The rehearsal inventory with watchdog_stall_budget_s set, and rank 3 wedging on a
    long prompt; nothing left running after the test."""
    def make(budget: int, **stub):
        inventory = inventory_copy(REPO / "inventory" / "rehearsal", tmp_path / "rack",
                                   watchdog_stall_budget_s=budget)
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50, **stub})
        return inventory
    yield make
    lifecycle.down(engine_rack)


@pytest.mark.parametrize("engine,budget", [("vllm", 8), ("sglang", 30)])
def test_a_wedged_rank_is_named_and_its_group_stopped(stall_rack, engine, budget):
    inventory = stall_rack(budget, ranks={"3": {"wedge_above_tokens": WEDGE_ABOVE}},
                           health_timeout_s=1)
    lifecycle.up(inventory, engine, "512k", burn=quick_burn)
    thread, result, events, broken = watching(inventory, duration=budget + 60)
    wedged_at = time.monotonic()
    send(inventory, LONG_PROMPT)
    assert broken.wait(budget + 30), events
    found = next(t for t, line in events if line.startswith("group broken")) - wedged_at
    thread.join(60)
    report = result["report"]
    print(f"\n{engine}: wedge found {found:.1f} s after the long prompt (stall budget "
          f"{budget} s): {report.failure}")
    assert report.acted == "stopped", events
    if engine == "vllm":  # /health stays green: progress and the GPUs find it
        assert report.failure.startswith("rank 3 on spark-04 wedged: 1 running, 0 waiting, "
                                         f"no token progress for "), report.failure
        assert f"(stall budget {budget} s); GPUs spinning 96 % at " in report.failure
        assert budget <= found < budget + 10, found
    else:  # SGLang's /health generates a token: red within seconds, the culprit named
        assert report.failure.startswith("rank 0 on spark-01 unhealthy"), report.failure
        assert "; likely culprit: rank 3 on spark-04 (GPUs spinning 96 % at " in report.failure
        assert found < 15, found
    assert nothing_runs(inventory) == []
    record = [r for r in head_audit(inventory) if r.get("task") == "watch:stopped"][-1]
    assert record["outcome"] == "ok" and record["changed"]["failure"] == report.failure
    assert record["changed"]["culprit"] == {"node": "spark-04", "rank": 3}
    if engine == "vllm":
        stall = record["changed"]["stall"]
        assert stall["culprit"] == {"node": "spark-04", "rank": 3}
        assert stall["gpus"]["spark-04"] == "spinning" and stall["running"] == 1
        assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {"busy"}
        assert stall["no_progress_s"] >= budget


def test_a_frozen_rank_on_vllm_is_found_by_progress(stall_rack):
    """The issue's own try: rank 3's process frozen (SIGSTOP) on the vLLM lane, then a
    request. Every process lives and /health stays 200; the request never progresses;
    rank 3's GPU stays idle while its peers wait busy in the collective: named."""
    budget = 6
    inventory = stall_rack(budget)
    lifecycle.up(inventory, "vllm", "512k", burn=quick_burn)
    spec = next(s for s in build_specs(inventory, "vllm", "512k") if s.rank == 3)
    with Fleet(inventory) as fleet:
        container = fleet.docker_client(spec.node).containers.get(spec.container_name)
        container.kill(signal="SIGSTOP")
        try:
            thread, result, events, broken = watching(inventory, duration=budget + 50)
            frozen = time.monotonic()
            send(inventory, 20)
            assert broken.wait(budget + 30), events
            found = next(t for t, line in events if line.startswith("group broken")) - frozen
            thread.join(60)
        finally:
            try:
                container.kill(signal="SIGCONT")
            except Exception:  # noqa: BLE001 - already stopped by the watch
                pass
    report = result["report"]
    print(f"\nvllm, rank 3 frozen: found {found:.1f} s after the request: {report.failure}")
    assert report.failure.startswith("rank 3 on spark-04 wedged: 1 running"), report.failure
    assert "GPUs idle 0 % at " in report.failure and budget <= found < budget + 10


def test_a_long_prefill_and_an_idle_engine_are_not_stalls(stall_rack):
    """Budget 3 s: the watch sees the engine idle for 5 s, then a prefill of 8 s (no
    counter moves, every GPU busy alike), then the answer: no failure."""
    inventory = stall_rack(3, prefill_tokens_per_s=LONG_PROMPT / 8)
    lifecycle.up(inventory, "vllm", "512k", burn=quick_burn)
    thread, result, events, broken = watching(inventory, duration=16)
    time.sleep(5)
    asked = send(inventory, LONG_PROMPT, max_tokens=4)
    asked.join(60)
    assert not asked.is_alive(), "the long prefill did not finish"
    thread.join(60)
    assert result["report"].failure is None, events
    assert len(nothing_runs(inventory)) == 8
