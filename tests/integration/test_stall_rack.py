"""Stalls of every shape (issues 25, 47 and 56): `invoke watch` on the rehearsal rack finds a
TP group that stops making progress while every process lives, stops it, names the rank
that stands out (or says that none does) and writes its evidence to the audit log; a long
chunked prefill, whose KV cache fills step by step, is left alone.

The faults are the ones an operator meets, and the simulated GPUs follow what the ranks'
processes really do, as real GPUs read (docs/field-notes.md#reading-the-gpu-with-nvidia-smi):
- (a) a node's NCCL hanging its collective (`rehearsal.nccl-hang`, vllm#42354's
  pattern): that rank's kernel spins at 16-27 W while its peers wait on their hosts;
- (b) a rank's process frozen on its node (`kill -STOP`, as a host-side deadlock leaves it):
  its GPU reads 0 % from the first sample, its draw held, while its peers spin in the
  collective. Its HCA still acknowledges their RDMA writes, so nothing fails after NCCL's
  34 s retry window: the group waits until the engine's watchdog, or the stall budget;
- (c) a rank's container frozen with `docker pause` (the cgroup freezer, not state T);
- (d) every rank spinning: NCCL's hang on every node, or a switch that drops NCCL's writes
  (its ports back at MTU 1500 under nodes at 9000) within NCCL's retry window;
- the stub's fault `wedge_above_tokens`: rank 3's host hangs in a long prompt's forward.
vLLM's /health stays 200 through all of it (it answers 503 only once the engine has
errored), so only progress shows it; SGLang's /health (a generation) goes red, and the watch
names the rank all the same.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from provision_helpers import inventory_copy
from stubgroup import nothing_runs

from sparkrack.deployments.headapi import Endpoint
from sparkrack.engines import build_specs
from sparkrack.engines.profile_file import STALL_BUDGET_S
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
        inventory, duration=duration, interval=1.0, on_event=on_event)))
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
    """Requests one after another to rank 0, each ~1 s of tokens, until stopped; the
    tokens counted as they stream."""

    def __init__(self, inventory, engine: str = "vllm"):
        self.head = Endpoint(inventory.head, 30000 if engine == "sglang" else 8000, "GLM-5.3")
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
    def make(budget: int | None, rack_vars: dict | None = None, **stub):
        """budget None: the inventory's default (each profile's stall_budget_s)."""
        inventory = inventory_copy(REPO / "inventory" / "rehearsal", tmp_path / "rack",
                                   **({} if budget is None else
                                      {"watchdog_stall_budget_s": budget}), **(rack_vars or {}))
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50, **stub})
        return inventory
    yield make
    lanes.down(engine_rack)


def frozen_under_load(inventory, engine: str, rank: int, freeze, thaw, wait: float):
    """A steady load, then the rank's container or process frozen by freeze(fleet, spec)
    (thaw(fleet, spec) after); (report, events, seconds from the freeze to the finding,
    seconds from the freeze to the group stopped)."""
    spec = next(s for s in build_specs(inventory, engine, "512k") if s.rank == rank)
    load = SteadyLoad(inventory, engine)
    with Fleet(inventory) as fleet:
        try:
            thread, result, events, broken = watching(inventory, duration=wait + 30)
            load.wait_answered(3)  # the watch has seen the group work
            freeze(fleet, spec)
            frozen = time.monotonic()
            assert broken.wait(wait), events
            found = next(t for t, line in events if line.startswith("group broken")) - frozen
            thread.join(60)
            stopped = time.monotonic() - frozen
        finally:
            load.stop()
            thaw(fleet, spec)  # gone once the watch stopped it
    return result["report"], events, found, stopped


def container_pid(fleet, spec) -> str:
    return str(fleet.docker_client(spec.node).containers.get(spec.container_name)
               .attrs["State"]["Pid"])


def test_a_rank_frozen_under_a_steady_vllm_load_is_named_within_the_default_budget(
        stall_rack):
    """(b), the issue's own try, with the inventory's default stall budget (60 s): rank
    3's process frozen on spark-04 with `kill -STOP`. Its GPU reads 0 % at once, drawing
    well above idle; its peers spin in the collective; its HCA still acknowledges their
    RDMA writes, so no rank fails after NCCL's 34 s retry window (the try blamed rank 0,
    which exited 39 s in): the stall is found from progress, rank 3 named, every rank
    stopped, in under 120 s."""
    inventory = stall_rack(None)
    lanes.up(inventory, "vllm", "512k")
    pids = {}

    def freeze(fleet, spec):
        pids[spec.node] = container_pid(fleet, spec)
        assert fleet.run({spec.node: ["kill", "-STOP", pids[spec.node]]})[spec.node].ok
        state = fleet.run({spec.node: ["cat", f"/proc/{pids[spec.node]}/stat"]})[spec.node]
        assert state.stdout.split(") ")[1].startswith("T"), state.stdout  # as the kernel says

    def thaw(fleet, spec):
        if spec.node in pids:
            fleet.run({spec.node: ["kill", "-CONT", pids[spec.node]]})

    report, events, found, stopped = frozen_under_load(inventory, "vllm", 3, freeze, thaw, 120)
    print(f"\nvllm, rank 3 frozen under load: found {found:.1f} s later, stopped at "
          f"{stopped:.1f} s (stall budget {STALL_BUDGET_S} s, the default): {report.failure}")
    assert report.failure.startswith("rank 3 on spark-04 wedged: "), report.failure
    assert STALL_BUDGET_S <= found < stopped < 120, (found, stopped)
    idle = re.search(r"GPUs idle 0 % at ([\d.]+) W: spark-04; spinning 9\d %", report.failure)
    assert idle and float(idle.group(1)) >= 16, report.failure  # its draw held, well above 4 W
    assert nothing_runs(inventory) == []
    stall = last_stop(inventory)["changed"]["stall"]
    assert stall["culprit"] == {"node": "spark-04", "rank": 3}
    assert stall["gpus"]["spark-04"] == "idle" and stall["stall_budget_s"] == STALL_BUDGET_S
    assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {"spinning"}


def test_a_container_frozen_with_docker_pause_is_named_by_its_state_and_its_gpu(stall_rack):
    """(c) under a steady SGLang load, default budget: rank 3's container frozen with
    `docker pause` (the cgroup freezer: its process reads D, not T). SGLang's /health
    (a generation through every rank) stops answering; the watch names rank 3 from docker's
    state and its GPU (0 %, its draw held) among its spinning peers, and stops the group
    (a paused container is stopped as any other)."""
    inventory = stall_rack(None, health_timeout_s=1)
    lanes.up(inventory, "sglang", "512k")

    def freeze(fleet, spec):
        fleet.docker_client(spec.node).containers.get(spec.container_name).pause()

    def thaw(fleet, spec):
        try:
            fleet.docker_client(spec.node).containers.get(spec.container_name).unpause()
        except Exception:  # noqa: BLE001 - stopped and removed by the watch: nothing to thaw
            pass

    report, events, found, stopped = frozen_under_load(inventory, "sglang", 3, freeze, thaw,
                                                       120)
    print(f"\nsglang, rank 3's container paused under load: found {found:.1f} s later, "
          f"stopped at {stopped:.1f} s: {report.failure}")
    assert report.failure.startswith("rank 0 on spark-01 unhealthy"), report.failure
    assert ("; likely culprit: rank 3 on spark-04 (its container is paused (docker pause: "
            "the cgroup freezer); GPUs ") in report.failure, report.failure
    # its GPU idle among its peers (rank 0's may still be computing, the rest spinning)
    assert re.search(r"[;(] ?(GPUs )?idle 0 % at [\d.]+ W: spark-04[;)]", report.failure), \
        report.failure
    assert found < stopped < 120, (found, stopped)
    assert nothing_runs(inventory) == []
    assert last_stop(inventory)["changed"]["culprit"] == {"node": "spark-04", "rank": 3}


@pytest.mark.parametrize("every", [False, True], ids=["one node", "every node"])
def test_a_collective_that_never_completes_is_found_from_progress(stall_rack, rack, every):
    """(a) the NCCL hang of vllm#42354 on spark-04 under a steady vLLM load: rank 3's
    kernel spins at 16-27 W, its peers wait; named. (d) on every node (set while the
    engine is idle, so that every rank meets it in the next request's first collective):
    every rank spins, no rank is to blame. Found from progress (vLLM's /health stays 200),
    with the inventory's default stall budget, the group stopped in under 120 s."""
    budget = STALL_BUDGET_S
    inventory = stall_rack(None)
    lanes.up(inventory, "vllm", "512k")
    nodes = [n.name for n in inventory.nodes] if every else ["spark-04"]
    load = None
    try:
        thread, result, events, broken = watching(inventory, duration=150)
        if every:
            for node in nodes:
                rack.nccl_hang(node)
            send(inventory, 20, max_tokens=50)
        else:
            load = SteadyLoad(inventory)
            load.wait_answered(3)
            rack.nccl_hang("spark-04")
        hanged = time.monotonic()
        assert broken.wait(120), events
        found = next(t for t, line in events if line.startswith("group broken")) - hanged
        thread.join(60)
        stopped = time.monotonic() - hanged
    finally:
        if load is not None:
            load.stop()
        for node in nodes:
            rack.nccl_hang(node, on=False)
    report = result["report"]
    print(f"\nvllm, NCCL hang on {'every node' if every else 'spark-04'}: found {found:.1f} s "
          f"later, stopped at {stopped:.1f} s (stall budget {budget} s, the default): "
          f"{report.failure}")
    assert budget <= found < stopped < 120, (found, stopped)
    stall = last_stop(inventory)["changed"]["stall"]
    assert stall["stall_budget_s"] == budget
    if every:
        assert report.failure.startswith(
            "group stalled, no single rank to blame (every GPU spinning: "), report.failure
        assert stall["culprit"] is None and set(stall["gpus"].values()) == {"spinning"}
    else:
        spin = re.search(r"GPUs spinning 96 % at ([\d.]+) W: spark-04; idle 0 %",
                         report.failure)
        assert report.failure.startswith("rank 3 on spark-04 wedged: ") and spin, \
            report.failure
        assert 16 <= float(spin.group(1)) <= 27
        assert stall["culprit"] == {"node": "spark-04", "rank": 3}
        assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {
            "idle"}
    assert nothing_runs(inventory) == []


def test_a_fabric_that_drops_nccls_writes_stops_the_group_blaming_no_single_rank(
        stall_rack, rack):
    """Every rank waits in the collective once the switch drops the writes (its ports back
    at 1500, the nodes at 9000): every GPU spins alike; the group is stopped and no rank is
    blamed, before NCCL's own retry window (~34 s) ends it."""
    budget = 6
    inventory = stall_rack(budget)
    lanes.up(inventory, "vllm", "512k")
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


def test_a_wedged_rank_is_named_and_its_group_stopped(stall_rack):
    """The stub's wedge (its host hangs in a long prompt's forward) under vLLM, whose
    /health stays green: progress and the GPUs find it. (SGLang's /health, a generation,
    goes red: the docker pause test above meets that path.)"""
    budget = 8
    inventory = stall_rack(budget, ranks={"3": {"wedge_above_tokens": WEDGE_ABOVE}},
                           health_timeout_s=1)
    lanes.up(inventory, "vllm", "512k")
    thread, result, events, broken = watching(inventory, duration=budget + 60)
    wedged_at = time.monotonic()
    send(inventory, LONG_PROMPT)
    assert broken.wait(budget + 30), events
    found = next(t for t, line in events if line.startswith("group broken")) - wedged_at
    thread.join(60)
    report = result["report"]
    print(f"\nvllm: wedge found {found:.1f} s after the long prompt (stall budget "
          f"{budget} s): {report.failure}")
    assert report.acted == "stopped", events
    assert report.failure.startswith("rank 3 on spark-04 wedged: 1 running, 0 waiting, "
                                     "no token progress for "), report.failure
    assert f"(stall budget {budget} s); GPUs idle 0 % at " in report.failure
    assert budget <= found < budget + 10, found
    assert nothing_runs(inventory) == []
    record = last_stop(inventory)
    assert record["outcome"] == "ok" and record["changed"]["failure"] == report.failure
    assert record["changed"]["culprit"] == {"node": "spark-04", "rank": 3}
    stall = record["changed"]["stall"]
    assert stall["culprit"] == {"node": "spark-04", "rank": 3}
    assert stall["gpus"]["spark-04"] == "idle" and stall["running"] == 1
    assert {kind for node, kind in stall["gpus"].items() if node != "spark-04"} == {
        "spinning"}
    assert stall["no_progress_s"] >= budget


def test_a_long_prefill_and_an_idle_engine_are_not_stalls(stall_rack):
    """Budget 4 s: the watch sees the engine idle for 5 s, then a 6 s prefill of three
    8,192-token chunks (vLLM's batched-token budget) in which no counter moves but the KV
    cache fills chunk by chunk, as vllm:kv_cache_usage_perc shows at every engine step;
    then the answer: no failure."""
    prompt = 3 * 8192
    inventory = stall_rack(4, prefill_tokens_per_s=prompt / 6)
    lanes.up(inventory, "vllm", "512k")
    thread, result, events, broken = watching(inventory, duration=18)
    time.sleep(5)
    asked = send(inventory, prompt, max_tokens=4)
    asked.join(60)
    assert not asked.is_alive(), "the long prefill did not finish"
    thread.join(60)
    assert result["report"].failure is None, events
    assert len(nothing_runs(inventory)) == 8


def test_a_firmware_power_limit_on_one_node_fires_the_slow_rack_alert_naming_it(stall_rack,
                                                                                rack):
    """Issue 56 item 3: a steady vLLM load, the watch learning the group's decode time per
    step (vllm:inter_token_latency_seconds), then spark-05's GPU held to 30 W by its
    firmware (rehearsal.power-limit): its clock drops to ~1,485 MHz, nvidia-smi showing no
    limit, and the whole TP group steps ~1.5 times slower (the field's 63 -> 94 ms/step).
    The watch says the rack serves slower once it has for watchdog_slow_for_s, naming
    spark-05 by its clock against its peers'; nothing before the limit; the group serves
    on (a slow rack is said, not stopped)."""
    slow_for = 15
    inventory = stall_rack(None, {"watchdog_slow_percent": 25, "watchdog_slow_for_s": slow_for})
    lanes.up(inventory, "vllm", "512k")
    load = SteadyLoad(inventory)
    try:
        thread, result, events, broken = watching(inventory, duration=150)
        load.wait_answered(3)
        learned = time.monotonic() + 120  # the baseline: 15 measures of 20 steps or more
        while time.monotonic() < learned and not any(
                line.startswith("the group's pace learned: decode ") for _, line in events):
            time.sleep(0.5)
        assert any(line.startswith("the group's pace learned") for _, line in events), events
        assert not [line for _, line in events if "serves slower" in line], events
        before = load.answered
        rack.power_limit("spark-05", 30)
        limited = time.monotonic()
        deadline = limited + 75
        while time.monotonic() < deadline and not any(
                "serves slower" in line for _, line in events):
            time.sleep(0.5)
        said = [(t, line) for t, line in events if "serves slower" in line]
        assert said, events
        found = said[0][0] - limited
        state = fleet_gpu(inventory, "spark-05")
        served = load.answered
    finally:
        load.stop()
        rack.power_limit("spark-05", None)
    thread.join(240)  # the watch's duration: it keeps watching the group, serving on
    assert not thread.is_alive()
    line = said[0][1]
    print(f"\nvllm, spark-05 held to 30 W: said {found:.1f} s later (watchdog_slow_for_s "
          f"{slow_for}): {line}")
    assert slow_for <= found < slow_for + 40, found
    assert line.startswith("warning: the rack serves slower: decode "), line
    assert re.search(r"decode \d+ ms/step against its baseline \d+ ms \(\+(\d+) %\)", line)
    rise = int(re.search(r"\(\+(\d+) %\)", line).group(1))
    assert 25 < rise < 80, line
    clock = re.search(r"spark-05's GPU differs: SM clock ([\d,]+) MHz against its peers' "
                      r"([\d,]+) MHz", line)
    assert clock, line
    assert int(clock.group(1).replace(",", "")) < 0.8 * int(clock.group(2).replace(",", ""))
    assert "check spark-05's power" in line
    assert state["power_limit"] in ("[N/A]", "N/A"), state  # nvidia-smi shows no limit
    assert result["report"].failure is None and served > before  # served on, slower
    assert len(nothing_runs(inventory)) == 8


def fleet_gpu(inventory, node: str) -> dict:
    """What nvidia-smi on node says of its GPU's power limit and SM clock."""
    with Fleet(inventory, [inventory.node(node)]) as fleet:
        done = fleet.run(["nvidia-smi", "--query-gpu=power.limit,clocks.sm",
                          "--format=csv,noheader"])[node]
    assert done.ok, done.error
    limit, clock = (v.strip() for v in done.stdout.strip().split(","))
    return {"power_limit": limit, "sm_clock": clock}
