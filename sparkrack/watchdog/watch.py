"""The rank watchdog (`invoke watch`, and the service's poll): stop or restart a group whose
rank exits, whose node is lost, whose head turns unhealthy or which stops making progress;
judge each poll's GPU readings and warn of the memory ratchet (docs/engines.md#watch,
docs/watchdog.md#wedged-not-dead-stalls).
"""

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkrack.deployments.headapi import Endpoint, HeadError
from sparkrack.deployments.ranks import Rank, refresh
from sparkrack.deployments.running import running
from sparkrack.engines.serving import Metrics, engine_serving
from sparkrack.facts.gpu import (
    SAMPLE,
    THERMAL,
    GpuSample,
    Thermal,
    parse_sample,
)
from sparkrack.facts.node import MEMORY, memory_of
from sparkrack.facts.queries import answer, argv
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.stop import stop_ranks
from sparkrack.watchdog.capguard import REAPPLY_EVERY_S, Reapplied, reapply_cap
from sparkrack.watchdog.culprit import Verdict, Working, learn, read_gpus
from sparkrack.watchdog.gpuwatch import Finding, judge
from sparkrack.watchdog.leak import LeakWatch
from sparkrack.watchdog.pace import PaceWatch, Slow, pace_reading
from sparkrack.watchdog.progress import StallWatch, reading
from sparkrack.watchdog.stall import ALIKE, Stall, blame, unwatched_line

POLL_INTERVAL_S = 1.0  # between polls of the group
HEALTH_TIMEOUT_S = 2  # rank 0's health answer within this, or the poll counts as unhealthy
HEALTH_FAILURES_TO_ACT = 3  # consecutive unhealthy polls of rank 0 before acting
BROKEN_STOP_TIMEOUT = 3  # seconds: a broken TP group has nothing left to drain
FLOOR_FRACTION = 0.05  # warn about a ratchet heading for 5 % of MemTotal
GPU_SAMPLES_KEPT = 3  # per node: the culprit is read from their median
WORKING_SAMPLES_KEPT = 30  # per node: its working power, from samples taken with progress


@dataclass
class WatchReport:
    """What the watchdog saw."""

    failure: str | None = None
    warnings: list[str] = field(default_factory=list)
    acted: str | None = None  # "stopped" / "restarted"
    left_running: list[str] = field(default_factory=list)  # ranks on nodes still lost at the end


@dataclass
class NodeSamples:
    """One SSH round trip to every node: the liveness probe (a dead node fails it within the
    connect timeout, where a docker API call would wait for the command timeout), memory,
    the GPU, and the GPU's thermal thresholds where asked."""

    memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # (MemTotal, MemAvailable) kB
    gpus: dict[str, GpuSample] = field(default_factory=dict)
    thermal: dict[str, Thermal] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # node: why it did not answer


def sample_nodes(fleet: Fleet, gpu: bool = True, thermal: tuple[str, ...] = ()) -> NodeSamples:
    """Every node's memory and GPU (memory alone unless gpu), in one round trip each; the
    thermal thresholds of the nodes named in thermal in the same trip."""
    base = [SAMPLE] if gpu else [MEMORY]
    found = NodeSamples()
    commands = {n.name: argv(base + ([THERMAL] if n.name in thermal else [])) for n in fleet.nodes}
    for result in fleet.run(commands, timeout=5):
        if result.status != "ok":
            found.lost[result.node] = result.error or result.status
            continue
        asked = base + ([THERMAL] if result.node in thermal else [])
        answers = answer(result.stdout, asked)
        memory = memory_of(answers, base[0])
        if memory is None:
            found.lost[result.node] = "no MemTotal/MemAvailable in its answer"
            continue
        found.memory[result.node] = memory
        sample = parse_sample(answers) if gpu else None
        if sample is not None:
            found.gpus[result.node] = sample
        if result.node in thermal:
            found.thermal[result.node] = answers.get(THERMAL)
    return found


@dataclass
class Poll:
    """What one poll of a running group saw."""

    failure: str | None = None  # why the group is broken, or None
    memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # node: (total, available) kB
    lost: dict[str, str] = field(default_factory=dict)  # node: why it did not answer
    states: list[Rank] = field(default_factory=list)  # each rank's container as docker says
    head_status: int | None = None  # rank 0's health answer (None: no answer or not asked)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (node, new ratchet warning)
    detected: float | None = None  # time.monotonic() when the failure was known
    no_progress_s: float = 0.0  # work pending on rank 0 without progress (0: none or unknown)
    stall: Stall | None = None  # the failure is a stall: its evidence
    culprit: Rank | None = None  # the rank whose GPU stood out when the group failed
    gpus: dict[str, GpuSample] = field(default_factory=dict)  # node: this poll's reading
    findings: list[Finding] = field(default_factory=list)  # gpuwatch's, this poll
    slow: Slow | None = None  # the group serves slower than its baseline (pace.py)
    silences: list = field(default_factory=list)  # the lost nodes judged (silence.Silence)

    @property
    def latched(self) -> dict[str, Finding]:
        """The nodes whose GPU reads latched while their rank is busy: node and evidence,
        for whatever power-cycles a latched node."""
        return {f.node: f for f in self.findings if f.kind == "latched"}


class GroupWatch:
    """One running TP group across polls: its ranks, rank 0's consecutive health failures and
    each node's ratchet detector. `invoke watch` and the watchdog service both poll with it."""

    def __init__(self, fleet: Fleet, inventory: Inventory, ranks: list[Rank], *, http_port: int,
                 health_path: str, stall_budget_s: float | None = None):
        self.fleet = fleet
        self.inventory = inventory
        self.ranks = ranks
        self.http_port = http_port
        self.health_path = health_path
        self.stall_budget_s = stall_budget_s  # None: progress is not judged
        self.metrics: Metrics | None = None  # rank 0's series, read from its engine file
        self.health_failures = 0
        self.leaks: dict[str, LeakWatch] = {}
        self.progress = StallWatch()
        self.no_progress_s = 0.0
        self.unwatched: str | None = None  # why progress cannot be read, once it could not
        self.gpus: dict[str, deque[GpuSample]] = {}  # the last few, while no progress
        self.working: dict[str, deque[GpuSample]] = {}  # samples taken with progress
        self.thermal: dict[str, Thermal] = {}  # each node's thresholds, read once
        self.reapplied: dict[str, float] = {}  # node: when its cap was last re-applied
        self.pace = PaceWatch(inventory.vars.watchdog_slow_percent,
                              inventory.vars.watchdog_slow_for_s)
        self.metrics_text: str | None = None  # rank 0's /metrics at this poll (None: unread)

    @property
    def head(self) -> Endpoint:
        rank0 = next(r for r in self.ranks if r.rank == 0)
        return Endpoint(self.inventory.node(rank0.node), self.http_port)

    def poll(self) -> Poll:
        """One poll: the nodes' liveness, memory and GPUs, each rank's container, rank 0's
        health and progress, each GPU judged on its own. Memory feeds the ratchet
        detectors only while the group is whole."""
        poll = Poll()
        self.metrics_text = None
        unread = tuple(r.node for r in self.ranks if r.node not in self.thermal)
        nodes = sample_nodes(self.fleet, thermal=unread)
        poll.memory, poll.lost, poll.gpus = nodes.memory, nodes.lost, nodes.gpus
        self.thermal.update(nodes.thermal)
        self._keep(nodes.gpus)
        if poll.lost:
            node, why = next(iter(poll.lost.items()))
            poll.failure = f"node {node} lost ({why})"
        else:
            poll.failure, poll.states, poll.head_status = self._check_ranks()
            if poll.failure and poll.head_status != 200 and not any(
                    not r.alive for r in poll.states):
                verdict = self._verdict()
                poll.culprit, why = blame(self.ranks, verdict, poll.states)
                if poll.culprit is not None:
                    poll.failure += (f"; likely culprit: rank {poll.culprit.rank} on "
                                     f"{poll.culprit.node} ("
                                     + (f"{why}; " if why else "") + f"{verdict.evidence})")
                elif verdict.alike:
                    poll.failure += (f"; no single rank to blame: "
                                     f"{ALIKE.get(verdict.alike, verdict.alike)} "
                                     f"({verdict.evidence})")
            elif not poll.failure:
                poll.stall = self._check_progress(nodes, poll.states)
                poll.no_progress_s = self.no_progress_s
                if poll.stall is not None:
                    poll.failure, poll.culprit = poll.stall.describe(), poll.stall.culprit
        if poll.failure:
            poll.detected = time.monotonic()
            return poll
        cap = self.inventory.vars.clock_cap_mhz
        poll.findings = [finding for r in self.ranks if r.node in nodes.gpus
                         for finding in judge(r.node, r.rank, nodes.gpus[r.node], cap,
                                              self.thermal.get(r.node))]
        poll.slow = self._check_pace(nodes.gpus)
        if poll.slow is not None:
            culprit = self._rank_on(poll.slow.node)
            poll.findings.append(Finding(poll.slow.node or "rack", -1 if culprit is None
                                         else culprit.rank, "slow", poll.slow.line()))
        for node, (total, available) in poll.memory.items():
            leak = self.leaks.setdefault(node, LeakWatch(floor_kb=int(total * FLOOR_FRACTION)))
            warning = leak.feed(time.monotonic(), available)
            if warning:
                poll.warnings.append((node, warning))
        return poll

    def reapply_cap(self, finding: Finding, by: str) -> Reapplied | None:
        """Re-apply the cap on an over-cap finding's node (capguard.py), unless it was
        re-applied there within REAPPLY_EVERY_S; None then."""
        last = self.reapplied.get(finding.node)
        if last is not None and time.monotonic() - last < REAPPLY_EVERY_S:
            return None
        self.reapplied[finding.node] = time.monotonic()
        return reapply_cap(self.fleet, self.inventory, finding, by)

    def ratcheting(self) -> set[str]:
        """The nodes whose ratchet warning stands (said, and memory not come back since)."""
        return {node for node, leak in self.leaks.items() if leak.warned}

    def stop(self, lost: dict[str, str] | None = None, remove: bool = True) -> dict[str, str]:
        """Stop every rank on a node that answers, at once (a broken group has nothing left
        to drain), and remove them unless told not to (the watchdog service keeps them for
        `invoke logs`); {container@node: error} for those that could not be stopped."""
        reachable = [r for r in self.ranks if r.node not in (lost or {})]
        return stop_ranks(self.fleet, reachable, timeout=BROKEN_STOP_TIMEOUT, remove=remove)

    def left_behind(self, lost: dict[str, str]) -> list[Rank]:
        """The group's ranks on nodes that did not answer when it was stopped."""
        return [r for r in self.ranks if r.node in lost]

    def _check_progress(self, nodes: NodeSamples, states: list[Rank] | None = None
                        ) -> Stall | None:
        """Feed rank 0's metrics to the stall watch; the stall once work has been pending
        past the budget without progress (the GPUs and the containers only name a rank)."""
        if self.stall_budget_s is None:
            return None
        engine = self.ranks[0].engine
        if self.metrics is None:
            self.metrics = engine_serving(self.inventory.path, engine).metrics
        try:
            status, body = self.head.get("/metrics", timeout=HEALTH_TIMEOUT_S)
        except HeadError:
            status, body = None, b""
        self.metrics_text = body.decode(errors="replace") if status == 200 else None
        seen = None if self.metrics_text is None else reading(self.metrics, self.metrics_text)
        if seen is None and self.unwatched is None:  # said once: stalls go unseen
            flag = self.metrics.flag
            self.unwatched = unwatched_line(self.ranks[0].node, engine, status, flag,
                                            None if flag is None else self._runs_with(flag),
                                            HEALTH_TIMEOUT_S)
        elif seen is not None:
            self.unwatched = None
        self.no_progress_s = self.progress.feed(time.monotonic(), seen)
        if self.no_progress_s == 0.0:
            if self.progress.moved:  # the group works: what its GPUs draw
                for node, sample in nodes.gpus.items():
                    self.working.setdefault(node, deque(maxlen=WORKING_SAMPLES_KEPT)).append(
                        sample)
            self.gpus.clear()
            return None
        if self.no_progress_s < self.stall_budget_s:
            return None
        verdict = self._verdict()
        culprit, why = blame(self.ranks, verdict, states or [])
        return Stall(self.no_progress_s, self.stall_budget_s, seen, verdict, culprit, why)

    def _check_pace(self, gpus: dict[str, GpuSample]) -> Slow | None:
        """Feed rank 0's pace series (read with the progress) and the GPUs to the pace
        watch; the Slow finding while the group serves slower (pace.py)."""
        if self.metrics is None:
            self.metrics = engine_serving(self.inventory.path, self.ranks[0].engine).metrics
        seen = None if self.metrics_text is None else pace_reading(self.metrics,
                                                                   self.metrics_text)
        return self.pace.feed(time.monotonic(), seen, gpus)

    def _runs_with(self, flag: str) -> bool | None:
        """Whether rank 0's container runs with flag (None: its command cannot be read)."""
        rank0 = next(r for r in self.ranks if r.rank == 0)
        try:
            args = self.fleet.docker(rank0.node).container(rank0.name).argv
        except Exception:  # noqa: BLE001 - only a warning's hint depends on it
            return None
        return any(arg == flag or arg.startswith(flag + "=") for arg in args)

    def _verdict(self) -> Verdict:
        working: dict[str, Working] = {}
        for node, samples in self.working.items():
            learned = learn(list(samples))
            if learned is not None:
                working[node] = learned
        return read_gpus({node: list(samples) for node, samples in self.gpus.items()}, working)

    def _keep(self, samples: dict[str, GpuSample]) -> None:
        """Add one GPU reading per node to the last GPU_SAMPLES_KEPT."""
        for node, sample in samples.items():
            self.gpus.setdefault(node, deque(maxlen=GPU_SAMPLES_KEPT)).append(sample)

    def _rank_on(self, node: str | None) -> Rank | None:
        return next((r for r in self.ranks if r.node == node), None)

    def _check_ranks(self) -> tuple[str | None, list[Rank], int | None]:
        """(why the group is broken or None, the ranks' states, rank 0's health answer)."""
        states = refresh(self.fleet, self.ranks)
        dead = [r for r in states if not r.alive]
        if dead:
            r = dead[0]
            what = {"unreachable": f"node {r.node} lost ({r.error})",
                    "missing": f"rank {r.rank} container on {r.node} is gone"}.get(
                r.status, f"rank {r.rank} on {r.node} {r.status} (exit code {r.exit_code})")
            return what, states, None
        head = next(r for r in states if r.rank == 0)
        status = self.head.status(self.health_path, timeout=HEALTH_TIMEOUT_S)
        self.health_failures = 0 if status == 200 else self.health_failures + 1
        if self.health_failures >= HEALTH_FAILURES_TO_ACT:
            return (f"rank 0 on {head.node} unhealthy ({status or 'no answer'}) for "
                    f"{self.health_failures} polls"), states, status
        return None, states, status


def tend_gpus(group: GroupWatch, poll: Poll, standing: set[tuple[str, str]],
              by: str) -> tuple[list[str], list[Reapplied]]:
    """Act on a poll's GPU findings: re-apply a lost cap (audited). The lines to say (each
    finding when it first stands: standing keeps those said until they clear; each
    re-application's outcome) and the re-applications made."""
    lines, made = [], []
    now = {(f.node, f.kind) for f in poll.findings}
    for finding in poll.findings:
        if (finding.node, finding.kind) not in standing:
            lines.append(f"warning: {finding.line}")
        if finding.kind == "over-cap":
            done = group.reapply_cap(finding, by)
            if done is not None:
                made.append(done)
                lines.append(done.line if done.took else f"warning: {done.line}")
    standing.clear()
    standing.update(now)
    return lines, made


def stop_left_behind(inventory: Inventory, ranks: list[Rank], *,
                     remove: bool = True) -> tuple[list[Rank], dict[str, str]]:
    """Stop the ranks a lost node kept running once the node answers again, over fresh
    connections (the group's may have died with the link): a rank cut off from its group
    keeps its process and its unified memory until the engine's own NCCL or scheduler
    watchdog fires, minutes later. (the ranks stopped, {node: why not yet})."""
    names = sorted({r.node for r in ranks})
    with Fleet(inventory, [inventory.node(name) for name in names]) as fleet:
        pending = {r.node: r.error or r.status
                   for r in fleet.run(["true"], timeout=HEALTH_TIMEOUT_S) if r.status != "ok"}
        answering = [r for r in ranks if r.node not in pending]
        errors = stop_ranks(fleet, answering, timeout=BROKEN_STOP_TIMEOUT, remove=remove)
    for rank in answering:
        if f"{rank.name}@{rank.node}" in errors:
            pending[rank.node] = errors[f"{rank.name}@{rank.node}"]
    return [r for r in answering if r.node not in pending], pending


def _stop_when_back(inventory: Inventory, left: list[Rank], until: float | None,
                    interval: float, on_event: Callable[[str], None]) -> list[Rank]:
    """Stop left's ranks as their nodes answer again, until none is left or `until`
    (time.monotonic()) passes; the ranks still running then."""
    on_event(f"{', '.join(sorted({r.node for r in left}))} did not answer: rank(s) "
             f"{', '.join(str(r.rank) for r in left)} still run there, holding memory; "
             "stopping them as soon as the node answers")
    while left:
        polled = time.monotonic()
        stopped, _ = stop_left_behind(inventory, left, remove=True)
        for rank in stopped:
            on_event(f"{rank.node} answers again: rank {rank.rank} ({rank.name}) stopped")
        left = [r for r in left if r not in stopped]
        if not left or (until is not None and time.monotonic() >= until):
            break
        time.sleep(max(0.0, interval - (time.monotonic() - polled)))
    return left


def watch(inventory: Inventory, *, http_port: int, health_path: str, duration: float | None = None,
          interval: float = POLL_INTERVAL_S, on_failure: str = "stop", restart: Callable[[], None] | None = None,
          on_event: Callable[[str], None] = lambda e: None,
          stall_budget_s: float | None = None) -> WatchReport:
    """Watch the running group until it fails (then act) or duration passes; an action is
    written to the audit log with what decided it."""
    report = WatchReport()
    with Fleet(inventory) as fleet:
        ranks = running(fleet).alive
        if not ranks:
            report.failure = "no engine is running"
            return report
        on_event(f"watching {ranks[0].engine} {ranks[0].profile}: {len(ranks)} ranks")
        group = GroupWatch(fleet, inventory, ranks, http_port=http_port, health_path=health_path,
                           stall_budget_s=stall_budget_s)
        started = time.monotonic()
        standing: set[tuple[str, str]] = set()
        said_pace = False
        while duration is None or time.monotonic() - started < duration:
            poll_started = time.monotonic()
            poll = group.poll()
            if poll.failure:
                report.failure = poll.failure
                on_event(f"group broken: {poll.failure}; stopping every rank")
                group.stop(poll.lost)
                report.acted = "stopped"
                left = group.left_behind(poll.lost)
                if left:
                    until = None if duration is None else started + duration
                    report.left_running = [f"rank {r.rank} on {r.node}" for r in
                                           _stop_when_back(inventory, left, until, interval,
                                                           on_event)]
                if on_failure == "restart" and restart is not None:
                    on_event("restarting the group in order")
                    restart()
                    report.acted = "restarted"
                for problem in record_action(fleet, inventory, "watch", ranks[0].deployment,
                                             poll, report.acted):
                    on_event(problem)
                return report
            for node, warning in poll.warnings:
                report.warnings.append(f"{node}: {warning}")
                on_event(f"warning: {node}: {warning}")
            for line in tend_gpus(group, poll, standing, "watch")[0]:
                if line.startswith("warning: "):
                    report.warnings.append(line[len("warning: "):])
                on_event(line)
            learned = group.pace.baseline_line()
            if learned and not said_pace:
                said_pace = True
                on_event(learned)
            if group.unwatched and group.unwatched not in report.warnings:
                report.warnings.append(group.unwatched)
                on_event(f"warning: {group.unwatched}")
            time.sleep(max(0.0, interval - (time.monotonic() - poll_started)))
    return report


def watch_group(inventory: Inventory, *, duration: float | None = None,
                interval: float = 1.0, restart: bool = False,
                on_event: Callable[[str], None] = lambda e: None):
    """Watch whatever engine runs (engine and profile read from its containers' labels)."""
    from sparkrack.engines import build_specs
    from sparkrack.lifecycle.lanes import up

    with Fleet(inventory) as fleet:
        alive = running(fleet).alive
    if not alive:
        return WatchReport(failure="no engine is running")
    engine, profile = alive[0].engine, alive[0].profile
    head = build_specs(inventory, engine, profile)[0]

    def again() -> None:
        up(inventory, engine, profile, on_event=on_event)

    return watch(inventory, http_port=head.ports["http"], health_path=head.health_path,
                 duration=duration, interval=interval, on_failure="restart" if restart else "stop",
                 restart=again, on_event=on_event, stall_budget_s=head.stall_budget_s)


def record_action(fleet: Fleet, inventory: Inventory, by: str, deployment: str, poll: Poll,
                  acted: str) -> list[str]:
    """Write the watchdog's action on a broken group to the audit log (the head's and the
    local copy), with the evidence: the failure, and a stall's counters and GPU samples.
    The problems met writing it (the action stands)."""
    from sparkrack.oplock import audit

    record = audit.new_record(inventory, f"{by}:{acted}", {"deployment": deployment})
    record.note(deployment=deployment, failure=poll.failure,
                culprit=None if poll.culprit is None else {
                    "node": poll.culprit.node, "rank": poll.culprit.rank},
                stall=None if poll.stall is None else poll.stall.evidence())
    return audit.log_unlocked(fleet, record, "ok")
