"""The slow-rack finding (watchdog/pace.py): a baseline of decode time per step and prefill
rate learned per batch size, a group serving slower for watchdog_slow_for_s, the node whose
GPU clock differs named (docs/watchdog.md#a-rack-that-serves-slower)."""

from __future__ import annotations

import pytest

from sparkrack.engines.serving import Metrics
from sparkrack.facts.gpu import GpuSample
from sparkrack.watchdog.pace import (
    PaceReading,
    PaceWatch,
    bucket,
    pace_reading,
    standout,
)

NODES = [f"spark-0{i}" for i in range(1, 9)]
HEALTHY = {n: GpuSample(95, 34.0, 2187) for n in NODES}
LIMITED = {**HEALTHY, "spark-05": GpuSample(94, 16.1, 1485)}


class Engine:
    """Rank 0's counters as a steady load moves them: a step of step_s per token."""

    def __init__(self, running: int = 1):
        self.running = running
        self.steps = self.step_sum = self.tokens = self.prefill = 0.0

    def serve(self, seconds: float, step_s: float, rate: float = 4000.0) -> PaceReading:
        self.steps += seconds / step_s
        self.step_sum += seconds
        self.prefill += 0.1 * seconds  # a tenth of the time prefilling
        self.tokens += 0.1 * seconds * rate
        return PaceReading(self.running, self.step_sum, self.steps, self.tokens, self.prefill)


def run(watch, engine, start, seconds, step_s, gpus, rate=4000.0):
    """Feed one reading a second; (the first finding's time, it) or (None, None)."""
    for t in range(start, start + seconds):
        slow = watch.feed(float(t), engine.serve(1.0, step_s, rate), gpus)
        if slow is not None:
            return t, slow
    return None, None


def test_a_power_limited_node_slows_the_group_and_is_named_after_the_set_time():
    watch, engine = PaceWatch(25, 60), Engine()
    assert run(watch, engine, 0, 120, 0.063, HEALTHY) == (None, None)  # the field's 63 ms
    assert watch.step_baseline() == pytest.approx(0.063)
    assert watch.baseline_line() == ("the group's pace learned: decode 63 ms/step at 1 "
                                     "request, prefill 4,000 tokens/s (said slower past +25 "
                                     "% for 60 s)")
    at, slow = run(watch, engine, 120, 200, 0.094, LIMITED)  # ... and its 94 ms
    # slower than 25 % once the 20 s window holds enough of the new steps, then 60 s more
    assert at is not None and 120 + 60 <= at <= 120 + 60 + 20, at
    assert slow.node == "spark-05" and slow.seconds >= 60
    line = slow.line()
    assert line.startswith("the rack serves slower: decode 94 ms/step against its baseline "
                           "63 ms (+49 %) for 6"), line
    assert ("spark-05's GPU differs: SM clock 1,485 MHz against its peers' 2,187 MHz, 16.1 W "
            "against 34.0 W. The group steps at its slowest rank's pace: check spark-05's "
            "power") in line
    assert watch.slow is slow


def test_a_slow_spell_shorter_than_the_set_time_is_not_said_and_does_not_move_the_baseline():
    watch, engine = PaceWatch(25, 60), Engine()
    run(watch, engine, 0, 120, 0.063, HEALTHY)
    assert run(watch, engine, 120, 50, 0.094, LIMITED) == (None, None)
    assert watch.step_baseline() == pytest.approx(0.063, rel=0.05)  # slow measures not learned
    assert run(watch, engine, 170, 100, 0.063, HEALTHY) == (None, None)
    assert watch.since is None


def test_a_bigger_batch_has_a_baseline_of_its_own():
    """Decode steps take longer with more requests in the batch: no alert for that."""
    watch, one = PaceWatch(25, 30), Engine(running=1)
    run(watch, one, 0, 100, 0.063, HEALTHY)
    eight = Engine(running=8)
    eight.steps, eight.step_sum, eight.tokens, eight.prefill = (
        one.steps, one.step_sum, one.tokens, one.prefill)
    assert run(watch, eight, 100, 200, 0.090, HEALTHY) == (None, None)
    assert "decode 90 ms/step at 8-15 requests" in watch.baseline_line()
    assert bucket(1) == 1 and bucket(8) == 4 and bucket(0) == 1


def test_a_lower_prefill_rate_alone_is_slow_and_no_node_standing_out_is_said():
    watch, engine = PaceWatch(25, 30), Engine()
    run(watch, engine, 0, 100, 0.063, HEALTHY, rate=4000)
    at, slow = run(watch, engine, 100, 120, 0.063, HEALTHY, rate=2500)
    assert at is not None and slow.step_s is None and slow.rate == pytest.approx(2500, rel=0.2)
    assert slow.node is None
    assert "prefill 2,500 tokens/s against 4,000 (-37 %)" in slow.line()
    assert "no node's GPU stands out (every busy GPU's SM clock at 2,187 MHz)" \
        in slow.line()


def test_no_baseline_no_finding_and_zero_percent_never():
    engine = Engine()
    watch = PaceWatch(25, 10)
    assert run(watch, engine, 0, 10, 0.094, LIMITED) == (None, None)  # nothing learned yet
    assert watch.baseline_line() is None
    never = PaceWatch(0, 10)
    run(never, engine, 10, 100, 0.063, HEALTHY)
    assert run(never, engine, 110, 100, 0.2, LIMITED) == (None, None)


def test_an_engine_restart_starts_the_measures_over():
    watch, engine = PaceWatch(25, 30), Engine()
    run(watch, engine, 0, 100, 0.063, HEALTHY)
    fresh = Engine()
    assert run(watch, fresh, 100, 60, 0.063, HEALTHY) == (None, None)
    assert watch.step_s == pytest.approx(0.063)


def test_standout_names_one_node_only():
    kept = {n: [s] * 5 for n, s in LIMITED.items()}
    assert standout(kept)[0] == "spark-05"
    two = {**kept, "spark-06": [GpuSample(94, 16.1, 1485)] * 5}
    assert standout(two) == (None, "spark-05, spark-06 all differ")
    assert standout({n: [s] for n, s in list(HEALTHY.items())[:2]})[0] is None


def test_the_pace_reading_of_an_engines_metrics():
    metrics = Metrics(flag=None, running="vllm:num_requests_running",
                      waiting="vllm:num_requests_waiting", progress=("vllm:prompt_tokens_total",),
                      step_time="vllm:inter_token_latency_seconds",
                      prefill_time="vllm:request_prefill_time_seconds",
                      prompt_tokens="vllm:prompt_tokens_total")
    text = "\n".join([
        "# TYPE vllm:num_requests_running gauge", "vllm:num_requests_running 2",
        "# TYPE vllm:prompt_tokens counter", "vllm:prompt_tokens_total 900",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        'vllm:inter_token_latency_seconds_bucket{le="+Inf"} 40',
        "vllm:inter_token_latency_seconds_count 40", "vllm:inter_token_latency_seconds_sum 2.5",
        "# TYPE vllm:request_prefill_time_seconds histogram",
        'vllm:request_prefill_time_seconds_bucket{le="+Inf"} 3',
        "vllm:request_prefill_time_seconds_count 3", "vllm:request_prefill_time_seconds_sum 0.6",
        ""])
    assert pace_reading(metrics, text) == PaceReading(2, 2.5, 40, 900, 0.6)
    assert pace_reading(metrics, "") is None
    plain = Metrics(flag=None, running="r", waiting="w", progress=("p",))
    assert pace_reading(plain, text) is None  # the engine file names no step_time
