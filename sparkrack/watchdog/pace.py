"""A rack that serves slower (pure): a group's decode time per step and prefill rate from
rank 0's own metrics, against a baseline learned while it served at its usual pace; slower
by watchdog_slow_percent for watchdog_slow_for_s without a break is a finding that names the
node whose GPU clock or power differs from its peers' (docs/watchdog.md#a-rack-that-serves-slower).

Decode time per step grows with the batch: the baseline is kept per batch size (the running
requests, in powers of two). A TP group steps at its slowest rank's pace, so one node held
back (a firmware power limit, a throttled board) slows every rank; its GPU is the one whose
SM clock reads under its peers' (a spin keeps the clock, so waiting peers do not hide it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from sparkrack.deployments.headapi import parse_prometheus
from sparkrack.engines.serving import Metrics
from sparkrack.facts.gpu import GpuSample
from sparkrack.remote.capjudge import BUSY_PERCENT

WINDOW_S = 20.0  # each measure: the steps and prefills of the last 20 s
MIN_STEPS = 20  # ... at least this many decode steps (a token a step: 0.4-1 s of one request)
MIN_PREFILL_S = 1.0  # ... at least this much prefill time
LEARN_MEASURES = 15  # measures (one a poll) before a baseline stands: ~35 s of serving
BASELINE_KEPT = 600  # the baseline: the median of the last 600 measures taken at its pace
SAMPLES_KEPT = 10  # per node: the GPU readings a slow group's culprit is read from
# A node stands out when its median SM clock reads this far under its peers' median (a 30 W
# firmware limit: 1,485 against 2,190 MHz), or its power this far from theirs
CLOCK_SHARE = 0.9
POWER_SHARE = 0.6


@dataclass(frozen=True)
class PaceReading:
    """Rank 0's pace series at one moment (None: not exposed)."""

    running: float
    step_sum: float | None
    step_count: float | None
    prompt_tokens: float | None
    prefill_sum: float | None


def pace_reading(metrics: Metrics, text: str) -> PaceReading | None:
    """The PaceReading of rank 0's /metrics text (None: no running gauge, or the engine
    file names no step_time series)."""
    if metrics.step_time is None:
        return None
    values = parse_prometheus(text)
    if metrics.running not in values:
        return None

    def get(name: str | None) -> float | None:
        return None if name is None else values.get(name)

    prefill = metrics.prefill_time
    return PaceReading(values[metrics.running], get(metrics.step_time + "_sum"),
                       get(metrics.step_time + "_count"), get(metrics.prompt_tokens),
                       get(None if prefill is None else prefill + "_sum"))


@dataclass(frozen=True)
class Slow:
    """A group found serving slower than its baseline, and the node whose GPU differs."""

    seconds: float  # serving slower without a break
    percent: float  # the threshold (watchdog_slow_percent)
    step_s: float | None  # decode time per step now, and its baseline
    step_base_s: float | None
    rate: float | None  # prefill tokens per second now, and its baseline
    rate_base: float | None
    node: str | None  # the node whose GPU stands out (None: none does)
    evidence: str  # its readings against its peers', or why none is named

    def line(self) -> str:
        parts = []
        if self.step_s is not None and self.step_base_s is not None:
            parts.append(f"decode {self.step_s * 1000:.0f} ms/step against its baseline "
                         f"{self.step_base_s * 1000:.0f} ms "
                         f"({_percent(self.step_s / self.step_base_s)})")
        if self.rate is not None and self.rate_base is not None:
            parts.append(f"prefill {self.rate:,.0f} tokens/s against {self.rate_base:,.0f} "
                         f"({_percent(self.rate / self.rate_base)})")
        what = "; ".join(parts)
        head = (f"the rack serves slower: {what} for {self.seconds:.0f} s (watchdog_slow_"
                f"percent {self.percent:g} %)")
        if self.node is None:
            return (f"{head}; no node's GPU stands out ({self.evidence}): look at the "
                    "engines' logs and the fabric (`invoke fabric.check`)")
        return (f"{head}; {self.node}'s GPU differs: {self.evidence}. The group steps at its "
                f"slowest rank's pace: check {self.node}'s power (its adapter, its firmware: "
                "a firmware power limit shows in no nvidia-smi field), then restart its lane "
                "or serve without it")


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.0f} %"


def bucket(running: float) -> int:
    """The batch-size class of a measure: 1, 2-3, 4-7, 8-15, ... requests running."""
    return max(1, int(running)).bit_length()


class PaceWatch:
    """One group's pace across polls: its measures, baselines and how long it has been
    slow."""

    def __init__(self, percent: float, for_s: float):
        self.percent = percent
        self.for_s = for_s
        self.history: deque[tuple[float, PaceReading]] = deque()
        self.steps: dict[int, deque[float]] = {}  # batch class: step times at its pace
        self.rates: deque[float] = deque(maxlen=BASELINE_KEPT)
        self.samples: dict[str, deque[GpuSample]] = {}
        self.since: float | None = None  # slow since (time.monotonic())
        self.step_s: float | None = None  # the last measures
        self.rate: float | None = None
        self.batch = 1  # the last measure's batch class (bucket)
        self.slow: Slow | None = None  # the finding standing at the last poll
        self.prior_steps: dict[int, float] = {}  # the lane's baselines from before this
        self.prior_rate: float | None = None  # start, until its own measures stand

    def feed(self, now: float, seen: PaceReading | None,
             gpus: Mapping[str, GpuSample]) -> Slow | None:
        """Take one poll's reading and GPU samples; the Slow finding once the group has
        served slower for for_s (None: not, or not yet, or no baseline)."""
        for node, sample in gpus.items():
            if sample.util is not None and sample.util >= BUSY_PERCENT:
                self.samples.setdefault(node, deque(maxlen=SAMPLES_KEPT)).append(sample)
        self.slow = None
        if self.percent <= 0 or seen is None:
            return None
        self._measure(now, seen)
        self.batch = bucket(seen.running)
        step_base, rate_base = self.step_baseline(), self.rate_baseline()
        slow_step = (self.step_s is not None and step_base is not None
                     and self.step_s > step_base * (1 + self.percent / 100))
        slow_rate = (self.rate is not None and rate_base is not None
                     and self.rate * (1 + self.percent / 100) < rate_base)
        if not (slow_step or slow_rate):
            self.since = None
            if self.step_s is not None:
                self.steps.setdefault(self.batch, deque(maxlen=BASELINE_KEPT)).append(
                    self.step_s)
            if self.rate is not None:
                self.rates.append(self.rate)
            return None
        self.since = now if self.since is None else self.since
        if now - self.since < self.for_s:
            return None
        node, evidence = standout(self.samples)
        self.slow = Slow(now - self.since, self.percent, self.step_s if slow_step else None,
                         step_base if slow_step else None, self.rate if slow_rate else None,
                         rate_base if slow_rate else None, node, evidence)
        return self.slow

    def step_baseline(self) -> float | None:
        """The decode time per step learned for the last measure's batch class (this
        start's own once it stands, else the lane's from before)."""
        own = self._base(self.steps.get(self.batch))
        return own if own is not None else self.prior_steps.get(self.batch)

    def rate_baseline(self) -> float | None:
        own = self._base(self.rates)
        return own if own is not None else self.prior_rate

    def export(self) -> dict:
        """The lane's baselines, to keep across its restarts (restore takes them back)."""
        steps = {**self.prior_steps, **{b: self._base(v) for b, v in self.steps.items()
                                        if self._base(v) is not None}}
        return {"steps": {str(b): round(v, 6) for b, v in sorted(steps.items())},
                "rate": self.rate_baseline()}

    def restore(self, kept: object) -> None:
        """Take a lane's baselines from before (export's; anything else is ignored): a node
        slowed from the group's start is then judged against the lane's own pace."""
        if not isinstance(kept, dict):
            return
        steps = kept.get("steps")
        if isinstance(steps, dict):
            self.prior_steps = {int(b): float(v) for b, v in steps.items()
                                if str(b).isdigit() and isinstance(v, (int, float)) and v > 0}
        rate = kept.get("rate")
        self.prior_rate = float(rate) if isinstance(rate, (int, float)) and rate > 0 else None

    def baseline_line(self) -> str | None:
        """The baseline the group is judged against, once one stands (None: not yet)."""
        step, rate = self.step_baseline(), self.rate_baseline()
        if step is None:
            return None
        size = {1: "1 request"}.get(self.batch, f"{2 ** (self.batch - 1)}-"
                                                f"{2 ** self.batch - 1} requests")
        return (f"the group's pace learned: decode {step * 1000:.0f} ms/step at {size}"
                + ("" if rate is None else f", prefill {rate:,.0f} tokens/s")
                + f" (said slower past +{self.percent:g} % for {self.for_s:g} s)")

    def _measure(self, now: float, seen: PaceReading) -> None:
        """The decode time per step and prefill rate over the last WINDOW_S (None where
        too little happened; every counter restarted with the engine: start over)."""
        last = self.history[-1][1] if self.history else None
        if last is not None and any(
                a is not None and b is not None and b < a for a, b in (
                    (last.step_count, seen.step_count), (last.prompt_tokens, seen.prompt_tokens))):
            self.history.clear()
        self.history.append((now, seen))
        while len(self.history) > 2 and now - self.history[1][0] >= WINDOW_S:
            self.history.popleft()
        first = self.history[0][1]
        self.step_s = self.rate = None
        if None not in (first.step_count, seen.step_count, first.step_sum, seen.step_sum):
            steps = seen.step_count - first.step_count
            if steps >= MIN_STEPS:
                self.step_s = (seen.step_sum - first.step_sum) / steps
        if None not in (first.prefill_sum, seen.prefill_sum, first.prompt_tokens,
                        seen.prompt_tokens):
            spent = seen.prefill_sum - first.prefill_sum
            tokens = seen.prompt_tokens - first.prompt_tokens
            if spent >= MIN_PREFILL_S and tokens > 0:
                self.rate = tokens / spent

    @staticmethod
    def _base(values: Sequence[float] | None) -> float | None:
        return median(values) if values and len(values) >= LEARN_MEASURES else None


def standout(samples: Mapping[str, Sequence[GpuSample]]) -> tuple[str | None, str]:
    """The one node whose busy GPU's median SM clock reads under CLOCK_SHARE of its peers'
    median, or whose power is off theirs by more than POWER_SHARE either way, and the
    readings that say so; (None, why) when none or several do."""
    clocks = {node: median(s.sm_mhz for s in kept if s.sm_mhz is not None)
              for node, kept in samples.items() if any(s.sm_mhz is not None for s in kept)}
    powers = {node: median(s.power_w for s in kept if s.power_w is not None)
              for node, kept in samples.items() if any(s.power_w is not None for s in kept)}
    if len(clocks) < 3:
        return None, "too few busy GPUs read to compare"
    found = {}
    for node in clocks:
        peers_clock = median(c for n, c in clocks.items() if n != node)
        peers_power = median(p for n, p in powers.items() if n != node) if len(powers) > 2 \
            else None
        power = powers.get(node)
        low_clock = clocks[node] < CLOCK_SHARE * peers_clock
        off_power = (power is not None and peers_power
                     and abs(power - peers_power) > POWER_SHARE * peers_power)
        if low_clock or off_power:
            found[node] = (f"SM clock {clocks[node]:,.0f} MHz against its peers' "
                           f"{peers_clock:,.0f} MHz"
                           + ("" if power is None or peers_power is None else
                              f", {power:.1f} W against {peers_power:.1f} W"))
    if len(found) == 1:
        return next(iter(found.items()))
    if found:
        return None, f"{', '.join(sorted(found))} all differ"
    low, high = f"{min(clocks.values()):,.0f}", f"{max(clocks.values()):,.0f}"
    return None, f"every busy GPU's SM clock {'at ' + low if low == high else f'within {low}-{high}'} MHz"
