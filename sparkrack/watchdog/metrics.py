"""The watchdog's Prometheus metrics (prometheus_client, a registry of its own).

The service builds a `Snapshot` after each poll and hands it to `update`; a scrape renders
the latest snapshot whole (a custom collector: a scrape never sees half of one poll), and
the action counters, which only ever go up. A value the watchdog does not know (a node
that did not answer has no SM clock) is left out rather than reported as 0. Names follow
Prometheus conventions: `sparkrack_` prefix, base units in the name (hertz, watts, bytes,
seconds), `_total` for counters. docs/watchdog.md ("Metrics") lists them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from sparkrack.pdu.nodeoutlets import StripReading

# A rank container's state: docker's own words, plus "missing" (no container for the rank
# on its node) and "unreachable" (its docker could not be asked).
RANK_STATES = ("created", "running", "restarting", "paused", "removing", "exited", "dead",
               "missing", "unreachable")
ACTIONS = ("stop", "restart", "restart_failed", "power_cycle", "power_cycle_failed")
REAPPLY_OUTCOMES = ("took", "failed")
NODE_LABELS = ("node", "rank")


@dataclass(frozen=True)
class NodeSnapshot:
    """One node as the last poll saw it; None where it is not known."""

    node: str
    rank: int
    up: bool
    sm_clock_mhz: int | None = None
    gpu_power_watts: float | None = None
    gpu_util_pct: int | None = None
    temperature_c: float | None = None
    slowdown_c: float | None = None  # the GPU's own thresholds (None: N/A or not read)
    shutdown_c: float | None = None
    over_cap: bool | None = None  # busy above the clock cap this poll (None: not judged)
    latched: bool | None = None  # latched while its rank is busy this poll
    mem_available_bytes: int | None = None
    mem_total_bytes: int | None = None
    cap_unit_ok: bool | None = None  # the clock-cap unit active and successful this boot
    cap_verified: bool | None = None  # a burn this boot found the GPU at or below the cap
    cap_verified_time: float | None = None  # when that burn ran (unix seconds)
    rank_state: str | None = None  # the rank container's state (RANK_STATES); None: no deployment
    memory_ratchet: bool = False  # the ratchet warning stands for this node


@dataclass(frozen=True)
class DeploymentInfo:
    """The deployment the watchdog follows (the head's "current" record)."""

    engine: str
    profile: str
    image: str
    image_id: str
    deployment_id: str


@dataclass(frozen=True)
class CycleMark:
    """A node's last power cycle by the watchdog (kept across its restarts and boots)."""

    node: str
    cause: str
    outcome: str  # ok | failed
    time: float  # when it was decided (unix seconds)


@dataclass(frozen=True)
class CycleHeld:
    """A power cycle the watchdog holds back now, and why (cycling.HOLDS)."""

    node: str
    cause: str
    reason: str


@dataclass(frozen=True)
class Snapshot:
    """Everything one poll of the watchdog knows, as the metrics show it."""

    nodes: tuple[NodeSnapshot, ...] = ()
    deployment: DeploymentInfo | None = None
    deployment_ready: bool = False  # the current deployment passed readiness and smoke test
    guarding: bool = False  # a running group is being guarded
    stepped_aside: bool = False  # an operator's task holds the rack lock
    ranks_expected: int = 0
    ranks_running: int = 0
    rank0_healthy: bool | None = None
    projected_watts: int | None = None
    strip_watts: int | None = None
    margin_watts: int | None = None
    poll_time: float | None = None  # unix seconds
    poll_seconds: float | None = None
    detection_to_stopped_seconds: float | None = None  # of the last stop or restart
    no_progress_seconds: float | None = None  # work pending on rank 0 without progress
    stalled: tuple[str, int] | None = None  # the current group was stopped stalled: (node, rank)
    blind: bool = False  # the deployment records cannot be read: nothing is judged
    strip: StripReading | None = None  # the PDU's last reading (None: no PDU, or unread)
    power_cycles: tuple[CycleMark, ...] = ()  # each node's last power cycle
    cycles_held: tuple[CycleHeld, ...] = ()  # power cycles held back now


@dataclass
class WatchdogMetrics:
    """The registry the HTTP endpoint serves, the latest snapshot and the counters."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.snapshot = Snapshot()
        self._lock = threading.Lock()
        self.pace_of: Callable[[], Any] = lambda: None  # the guarded group's PaceWatch
        self.registry.register(PaceCollector(lambda: self.pace_of()))
        self.actions = Counter("sparkrack_watchdog_actions", "Actions the watchdog took on a "
                               "broken TP group: stop, restart, restart_failed (a restart "
                               "whose `up` failed; the group is then down); on a latched "
                               "node: power_cycle, power_cycle_failed", ["action"],
                               registry=self.registry)
        for action in ACTIONS:
            self.actions.labels(action=action)  # every series exists from the start, at 0
        self.stalls = Counter("sparkrack_watchdog_stalls", "TP groups the watchdog found "
                              "stalled: work pending, no token progress for the stall budget, "
                              "GPUs not all computing alike", registry=self.registry)
        self.cap_reapplied = Counter(
            "sparkrack_watchdog_cap_reapplied", "Clock caps the watchdog re-applied on a GPU "
            "found busy above the cap, per node and outcome (took: the unit succeeded and the "
            "clock came under the cap; failed)", ["node", "outcome"], registry=self.registry)
        self.ratchet_warnings = Counter(
            "sparkrack_watchdog_memory_ratchet_warnings", "Memory-ratchet warnings raised, "
            "per node", ["node"], registry=self.registry)
        self.held = Counter(
            "sparkrack_watchdog_power_cycles_held", "Power cycles the watchdog held back, "
            "once per node and reason while it stands (pending: another cycle is not "
            "finished; window: the node was cycled within watchdog_power_cycle_window_minutes; "
            "budget: the restart budget is spent; refused: it could not be finished safely)",
            ["node", "reason"], registry=self.registry)
        self.registry.register(_SnapshotCollector(self))

    def count_action(self, action: str) -> None:
        """One more action of a kind in ACTIONS."""
        if action not in ACTIONS:
            raise ValueError(f"unknown watchdog action {action!r}")
        self.actions.labels(action=action).inc()

    def count_stall(self) -> None:
        """One more group found stalled."""
        self.stalls.inc()

    def count_cap_reapplied(self, node: str, took: bool) -> None:
        """One more re-application of the cap on node."""
        self.cap_reapplied.labels(node=node, outcome=REAPPLY_OUTCOMES[0 if took else 1]).inc()

    def count_held(self, node: str, reason: str) -> None:
        """One more power cycle of node held back, for reason."""
        self.held.labels(node=node, reason=reason).inc()

    def count_ratchet_warning(self, node: str) -> None:
        """One more memory-ratchet warning on node."""
        self.ratchet_warnings.labels(node=node).inc()


def update(metrics: WatchdogMetrics, snapshot: Snapshot) -> None:
    """Make snapshot what the next scrape shows (replaces the previous one whole)."""
    with metrics._lock:
        metrics.snapshot = snapshot


def _gauge(name: str, help_text: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=list(labels))


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(bool(value))


class _SnapshotCollector(Collector):
    """Renders WatchdogMetrics.snapshot as gauge families at scrape time."""

    def __init__(self, metrics: WatchdogMetrics):
        self.metrics = metrics

    def describe(self) -> list:
        return list(self.collect())

    def collect(self) -> Iterator:
        with self.metrics._lock:
            snap = self.metrics.snapshot
        yield from _node_families(snap)
        yield from _rack_families(snap)
        yield from _pdu_families(snap.strip)
        yield from _cycle_families(snap)


NODE_GAUGES = (
    # (name, help, value of a NodeSnapshot)
    ("sparkrack_node_up", "1 if the node answered the watchdog's SSH round trip this poll",
     lambda n: float(n.up)),
    ("sparkrack_gpu_sm_clock_hertz", "GPU SM clock now (nvidia-smi clocks.sm)",
     lambda n: None if n.sm_clock_mhz is None else n.sm_clock_mhz * 1e6),
    ("sparkrack_gpu_power_watts", "GPU power draw now (nvidia-smi power.draw)",
     lambda n: n.gpu_power_watts),
    ("sparkrack_gpu_utilization_ratio", "GPU utilization now, 0-1 (nvidia-smi "
     "utilization.gpu)", lambda n: None if n.gpu_util_pct is None else n.gpu_util_pct / 100),
    ("sparkrack_gpu_temperature_celsius", "GPU temperature now (nvidia-smi temperature.gpu)",
     lambda n: n.temperature_c),
    ("sparkrack_gpu_slowdown_temperature_celsius", "The GPU's own hardware slowdown "
     "temperature (nvidia-smi -q; absent where it gives N/A)", lambda n: n.slowdown_c),
    ("sparkrack_gpu_shutdown_temperature_celsius", "The GPU's own shutdown temperature "
     "(nvidia-smi -q; absent where it gives N/A)", lambda n: n.shutdown_c),
    ("sparkrack_gpu_over_cap", "1 while the GPU is busy above the clock cap (its lock lost; "
     "the watchdog re-applies it), while a group is guarded", lambda n: _flag(n.over_cap)),
    ("sparkrack_gpu_latched", "1 while the GPU reads latched in its low-clock state (< 1,000 "
     "MHz) with its rank busy: only a full power removal clears it",
     lambda n: _flag(n.latched)),
    ("sparkrack_node_memory_available_bytes", "MemAvailable of the node's unified memory "
     "(GPU and OS share it on GB10)", lambda n: n.mem_available_bytes),
    ("sparkrack_node_memory_total_bytes", "MemTotal of the node's unified memory",
     lambda n: n.mem_total_bytes),
    ("sparkrack_clock_cap_unit_ok", "1 if sparkrack-clock-cap.service is active and "
     "succeeded this boot", lambda n: _flag(n.cap_unit_ok)),
    ("sparkrack_clock_cap_verified", "1 if a burn since the last boot found the GPU at or "
     "below the clock cap under load (no query shows the lock: only a burn proves it)",
     lambda n: _flag(n.cap_verified)),
    ("sparkrack_clock_cap_verified_timestamp_seconds", "When the burn that verified the cap "
     "this boot ran (absent: none did)", lambda n: n.cap_verified_time),
    ("sparkrack_memory_ratchet", "1 while MemAvailable ratchets down (three new lows without "
     "coming back: the indexer leak)", lambda n: float(n.memory_ratchet)),
)


def _node_families(snap: Snapshot) -> Iterator:
    for name, help_text, value_of in NODE_GAUGES:
        family = _gauge(name, help_text, NODE_LABELS)
        for node in snap.nodes:
            if name != "sparkrack_node_up" and not node.up:
                continue  # nothing is known about a node that did not answer
            value = value_of(node)
            if value is not None:
                family.add_metric([node.node, str(node.rank)], value)
        yield family
    states = _gauge("sparkrack_rank_container_state", "1 for the state the rank's engine "
                    "container is in (docker's word, or missing / unreachable), 0 for the "
                    "others; absent while no deployment is current", (*NODE_LABELS, "state"))
    for node in snap.nodes:
        if node.rank_state is None:
            continue
        for state in RANK_STATES:
            states.add_metric([node.node, str(node.rank), state],
                              float(node.rank_state == state))
    yield states


def _rack_families(snap: Snapshot) -> Iterator:
    info = InfoMetricFamily("sparkrack_deployment", "The deployment the watchdog follows "
                            "(the head's current record); absent when none",
                            labels=["engine", "profile", "image", "image_id", "deployment"])
    if snap.deployment is not None:
        d = snap.deployment
        info.add_metric([d.engine, d.profile, d.image, d.image_id, d.deployment_id], {})
    yield info
    scalars = (
        ("sparkrack_deployment_current", "1 while the head records a current deployment "
         "(`up`/`roll` started it; `down` clears it)", float(snap.deployment is not None)),
        ("sparkrack_deployment_ready", "1 once the current deployment passed readiness and "
         "its smoke request (it is the last known-good): from then on the watchdog guards it",
         float(snap.deployment_ready)),
        ("sparkrack_group_ranks_expected", "Ranks of the current deployment (0: none)",
         float(snap.ranks_expected)),
        ("sparkrack_group_ranks_running", "Ranks of the current deployment whose container "
         "runs", float(snap.ranks_running)),
        ("sparkrack_rank0_healthy", "1 if rank 0's health endpoint answered 200 this poll",
         _flag(snap.rank0_healthy)),
        ("sparkrack_power_projected_watts", "Projected worst-case rack draw: each node at "
         "its capped watts if its cap is verified this boot, else at its uncapped watts",
         snap.projected_watts),
        ("sparkrack_power_strip_watts", "Rating of the strip feeding the rack "
         "(power_strip_watts)", snap.strip_watts),
        ("sparkrack_power_margin_watts", "Headroom kept below the strip (power_margin_watts)",
         snap.margin_watts),
        ("sparkrack_watchdog_guarding", "1 while the watchdog guards a running group",
         float(snap.guarding)),
        ("sparkrack_watchdog_stepped_aside", "1 while an operator's task holds the rack lock "
         "(the watchdog takes no action)", float(snap.stepped_aside)),
        ("sparkrack_watchdog_last_poll_timestamp_seconds", "When the last poll ended",
         snap.poll_time),
        ("sparkrack_watchdog_poll_duration_seconds", "How long the last poll took",
         snap.poll_seconds),
        ("sparkrack_watchdog_detection_to_stopped_seconds", "From noticing the last broken "
         "group to every reachable rank stopped", snap.detection_to_stopped_seconds),
        ("sparkrack_group_no_progress_seconds", "While guarding: how long rank 0 has had "
         "requests running or waiting without a token counter moving (0: progress or idle)",
         snap.no_progress_seconds),
        ("sparkrack_watchdog_blind", "1 while the watchdog cannot read the deployment "
         "records (the head does not answer, or refuses its key): it judges nothing",
         float(snap.blind)),
    )
    for name, help_text, value in scalars:
        family = _gauge(name, help_text)
        if value is not None:
            family.add_metric([], float(value))
        yield family
    stalled = _gauge("sparkrack_group_stalled", "1 while the current deployment is down "
                     "because the watchdog found it stalled; node and rank name the rank "
                     "whose GPU stood out (empty and -1: none did)", NODE_LABELS)
    if snap.stalled is not None:
        stalled.add_metric([snap.stalled[0], str(snap.stalled[1])], 1.0)
    yield stalled


def _pdu_families(strip: StripReading | None) -> Iterator:
    """The strip as the PDU measures it (absent without a PDU the watchdog can read)."""
    measured = _gauge("sparkrack_pdu_measured_watts", "The strip's draw as the PDU measures "
                      "it: its whole load, or its mapped outlets' sum if larger", ("pdu",))
    outlet_watts = _gauge("sparkrack_pdu_outlet_watts", "What a node's PDU outlet draws now",
                          ("pdu", "node", "outlet"))
    outlet_on = _gauge("sparkrack_pdu_outlet_on", "1 while a node's PDU outlet is switched on",
                       ("pdu", "node", "outlet"))
    if strip is not None:
        measured.add_metric([strip.pdu], float(strip.measured_watts))
        for outlet in strip.outlets:
            labels = [strip.pdu, outlet.node, str(outlet.outlet)]
            if outlet.watts is not None:  # a PDU that does not meter outlets: absent
                outlet_watts.add_metric(labels, float(outlet.watts))
            outlet_on.add_metric(labels, float(outlet.on))
    yield from (measured, outlet_watts, outlet_on)


def _cycle_families(snap: Snapshot) -> Iterator:
    """The power cycles made (the last per node) and held back now."""
    last = _gauge("sparkrack_watchdog_power_cycle_timestamp_seconds", "When the watchdog "
                  "last power-cycled a node (kept across its restarts and its own node's "
                  "boots); cause and outcome (ok, failed) as labels", ("node", "cause", "outcome"))
    for mark in snap.power_cycles:
        last.add_metric([mark.node, mark.cause, mark.outcome], mark.time)
    held = _gauge("sparkrack_watchdog_power_cycle_held", "1 while the watchdog holds back a "
                  "power cycle of a node it would otherwise make (reason: pending, window, "
                  "budget, refused)", ("node", "cause", "reason"))
    for hold in snap.cycles_held:
        held.add_metric([hold.node, hold.cause, hold.reason], 1.0)
    yield from (last, held)


class PaceCollector(Collector):
    """The guarded group's pace (watchdog/pace.py) as gauge families at scrape time: its
    decode time per step and prefill rate against their baselines, and whether it serves
    slower (absent while no group is guarded or nothing was measured)."""

    def __init__(self, pace_of: Callable[[], Any]):
        self.pace_of = pace_of  # the guarded group's PaceWatch, or None

    def describe(self) -> list:
        return list(self.collect())

    def collect(self) -> Iterator:
        pace = self.pace_of()
        if pace is None:
            return
        values = (
            ("sparkrack_decode_step_seconds", "Rank 0's decode time per step over the last "
             "20 s (its engine's inter-token latency histogram)", pace.step_s),
            ("sparkrack_decode_step_baseline_seconds", "The decode time per step the group "
             "served at before, at this batch size (the median of its measures)",
             pace.step_baseline()),
            ("sparkrack_prefill_tokens_per_second", "Rank 0's prefill rate over the last 20 s",
             pace.rate),
            ("sparkrack_prefill_baseline_tokens_per_second", "The prefill rate the group "
             "served at before", pace.rate_baseline()))
        for name, text, value in values:
            if value is not None:
                family = GaugeMetricFamily(name, text)
                family.add_metric([], float(value))
                yield family
        slower = GaugeMetricFamily("sparkrack_serving_slower", "1 while the group serves "
                                   "watchdog_slow_percent slower than its baseline for "
                                   "watchdog_slow_for_s; node: the one whose GPU differs from "
                                   "its peers' ('' none)", labels=["node"])
        slow = pace.slow
        slower.add_metric([(slow.node or "") if slow is not None else ""],
                          float(slow is not None))
        yield slower
