"""Stalls of every shape (issues 25 and 47): `invoke watch` on the rehearsal rack finds a TP
group that stops making progress while every process lives, stops it, names the rank whose
GPU stands out (or says that none does) and writes its evidence to the audit log; a long
prefill that keeps every GPU busy is left alone.

The faults are the ones an operator meets, and the simulated GPUs follow what the ranks'
processes really do: a rank's process frozen on its node (`kill -STOP`, as a host-side
deadlock leaves it) drains its GPU to idle while its peers wait in the collective, spinning
at low power; a fabric that drops NCCL's writes (the switch's ports back at MTU 1500 under
nodes at 9000) leaves every rank spinning in the collective; the stub's fault
`wedge_above_tokens` hangs rank 3's host in a long prompt's forward. vLLM's /health stays
200 through all of it (it answers 503 only once the engine has errored), so only progress
shows it; SGLang's /health (a generation) goes red, and the watch names the rank all the
same.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from provision_helpers import inventory_copy
from stubgroup import nothing_runs, quick_burn

from sparkrack.deployments.headapi import Endpoint
from sparkrack.engines import build_specs
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes
from sparkrack.oplock.audit import parse_lines
from sparkrack.oplock.remote import AUDIT_FILE
from sparkrack.rehearsal.stub.modeldir import write_stub_model
from sparkrack.rehearsal.switch import Switch
from sparkrack.watchdog.watch import watch_group

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
WEDGE_ABOVE = 400  # words: a longer prompt wedges rank 3
LONG_PROMPT = 600


def watching(inventory, duration: float):
    """Run watchdog.watch.watch_group in a thread: (thread, result, events, broken)."""
    result, events = {}, []
    started, broken = threading.Event(), threading.Event()

    def on_event(line):
        events.append((time.monotonic(), line))
        (broken if line.startswith("group broken") else started).set()

    thread = threading.Thread(target=lambda: result.update(report=watch_group(
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


class SteadyLoad:
    """Requests one after another to rank 0 (vLLM), each ~1 s of tokens, until stopped; the
    tokens counted as they stream."""

    def __init__(self, inventory):
        self.head = Endpoint(inventory.head, 8000, "GLM-5.3")
        self.done = threading.Event()
        self.answered = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                self.head.chat([{"role": "user", "content": "word " * 20}], 50, timeout=120)
                self.answered += 1
            except Exception:  # noqa: BLE001 - the frozen or stopped group drops it
                time.sleep(0.2)

    def wait_answered(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.answered < count:
            assert time.monotonic() < deadline, f"only {self.answered} answers"
            time.sleep(0.1)

    def stop(self):
        self.done.set()


def lifecycle_engine(inventory) -> str:
    return nothing_runs(inventory)[0].engine


def head_audit(inventory) -> list[dict]:
    with Fleet(inventory, [inventory.head]) as fleet:
        done = fleet.run(["cat", AUDIT_FILE])[inventory.head.name]
    assert done.ok, done.error
    return parse_lines(done.stdout)


def last_stop(inventory) -> dict:
    return [r for r in head_audit(inventory) if r.get("task") == "watch:stopped"][-1]


@pytest.fixture
def stall_rack(engine_rack, tmp_path):
    """The rehearsal inventory with watchdog_stall_budget_s set, the stub settings given;
    nothing left running after the test."""
    def make(budget: int, **stub):
        inventory = inventory_copy(REPO / "inventory" / "rehearsal", tmp_path / "rack",
                                   watchdog_stall_budget_s=budget)
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50, **stub})
        return inventory
    yield make
    lanes.down(engine_rack)


def test_a_rank_frozen_under_a_steady_vllm_load_is_named_and_its_group_stopped(stall_rack):
    """The issue's own try: a steady vLLM load, then rank 3's process frozen on spark-04
    with `kill -STOP` (its PID as the node sees it). Its GPU drains to idle while its peers
    spin in the collective; found within the stall budget, named, every rank stopped."""
    budget = 6
    inventory = stall_rack(budget)
    lanes.up(inventory, "vllm", "512k", burn=quick_burn)
    spec = next(s for s in build_specs(inventory, "vllm", "512k") if s.rank == 3)
    load = SteadyLoad(inventory)
    with Fleet(inventory) as fleet:
        pid = str(fleet.docker_client(spec.node).containers.get(spec.container_name)
                  .attrs["State"]["Pid"])
        try:
            thread, result, events, broken = watching(inventory, duration=budget + 50)
            load.wait_answered(3)  # the watch has seen the group work
            assert fleet.run({spec.node: ["kill", "-STOP", pid]})[spec.node].ok
            frozen = time.monotonic()
            state = fleet.run({spec.node: ["cat", f"/proc/{pid}/stat"]})[spec.node].stdout
            assert state.split(") ")[1].startswith("T"), state  # stopped, as the kernel says
            assert broken.wait(budget + 30), events
            found = next(t for t, line in events if line.startswith("group broken")) - frozen
            thread.join(60)
        finally:
            load.stop()
            fleet.run({spec.node: ["kill", "-CONT", pid]})  # gone once the watch stopped it
    report = result["report"]
    print(f"\nvllm, rank 3 frozen under load: found {found:.1f} s later (stall budget "
          f"{budget} s): {report.failure}")
    assert report.failure.startswith("rank 3 on spark-04 wedged: "), report.failure
    assert "GPUs idle 0 % at " in report.failure and ": spark-04; spinning 9" in report.failure
    assert budget <= found < budget + 10, found
    assert nothing_runs(inventory) == []
    stall = last_stop(inventory)["changed"]["stall"]
    assert stall["culprit"] == {"node": "spark-04", "rank": 3}
    assert stall["gpus"]["spark-04"] == "idle"
    assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {"spinning"}


def test_a_fabric_that_drops_nccls_writes_stops_the_group_blaming_no_single_rank(
        stall_rack, rack):
    """Every rank waits in the collective once the switch drops the writes (its ports back
    at 1500, the nodes at 9000): every GPU spins alike; the group is stopped and no rank is
    blamed, before NCCL's own retry window (~34 s) ends it."""
    budget = 6
    inventory = stall_rack(budget)
    lanes.up(inventory, "vllm", "512k", burn=quick_burn)
    load = SteadyLoad(inventory)
    try:
        thread, result, events, broken = watching(inventory, duration=budget + 50)
        load.wait_answered(3)
        cut = time.monotonic()
        rack.set_switch(Switch(1500))  # every port, one after another: a few seconds
        assert broken.wait(budget + 30), events
        found = next(t for t, line in events if line.startswith("group broken")) - cut
        thread.join(60)
    finally:
        load.stop()
        rack.set_switch(Switch(inventory.vars.rehearsal_switch_mtu))
    report = result["report"]
    print(f"\nvllm, switch at 1500: found {found:.1f} s later (stall budget {budget} s): "
          f"{report.failure}")
    assert report.failure.startswith(
        "group stalled, no single rank to blame (every GPU spinning: a collective every rank "
        "waits in, as a fabric or NCCL hang leaves it): "), report.failure
    assert found < budget + 10, found
    record = last_stop(inventory)
    assert "culprit" not in record["changed"]  # None: no single rank
    stall = record["changed"]["stall"]
    assert stall["alike"] == "spinning" and stall["culprit"] is None
    assert set(stall["gpus"].values()) == {"spinning"}


@pytest.mark.parametrize("engine,budget", [("vllm", 8), ("sglang", 30)])
def test_a_wedged_rank_is_named_and_its_group_stopped(stall_rack, engine, budget):
    inventory = stall_rack(budget, ranks={"3": {"wedge_above_tokens": WEDGE_ABOVE}},
                           health_timeout_s=1)
    lanes.up(inventory, engine, "512k", burn=quick_burn)
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
                                         "no token progress for "), report.failure
        assert f"(stall budget {budget} s); GPUs idle 0 % at " in report.failure
        assert budget <= found < budget + 10, found
    else:  # SGLang's /health generates a token: red within seconds, the culprit named
        assert report.failure.startswith("rank 0 on spark-01 unhealthy"), report.failure
        assert "; likely culprit: rank 3 on spark-04 (GPUs idle 0 % at " in report.failure
        assert found < 15, found
    assert nothing_runs(inventory) == []
    record = last_stop(inventory)
    assert record["outcome"] == "ok" and record["changed"]["failure"] == report.failure
    assert record["changed"]["culprit"] == {"node": "spark-04", "rank": 3}
    if engine == "vllm":
        stall = record["changed"]["stall"]
        assert stall["culprit"] == {"node": "spark-04", "rank": 3}
        assert stall["gpus"]["spark-04"] == "idle" and stall["running"] == 1
        assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {
            "spinning"}
        assert stall["no_progress_s"] >= budget


def test_a_long_prefill_and_an_idle_engine_are_not_stalls(stall_rack):
    """Budget 3 s: the watch sees the engine idle for 5 s, then a prefill of 8 s (no
    counter moves, every GPU busy at full power), then the answer: no failure."""
    inventory = stall_rack(3, prefill_tokens_per_s=LONG_PROMPT / 8)
    lanes.up(inventory, "vllm", "512k", burn=quick_burn)
    thread, result, events, broken = watching(inventory, duration=16)
    time.sleep(5)
    asked = send(inventory, LONG_PROMPT, max_tokens=4)
    asked.join(60)
    assert not asked.is_alive(), "the long prefill did not finish"
    thread.join(60)
    assert result["report"].failure is None, events
    assert len(nothing_runs(inventory)) == 8
