"""The rank watchdog: notice within seconds when a rank's container exits, a node is lost or
the head turns unhealthy, and stop the whole group (or restart it in order) instead of
leaving a half-dead TP group for the engine's own 300 s watchdog. A rank on a node that was
lost is stopped as soon as that node answers again. While the group serves, each node's
MemAvailable is watched for the indexer-leak ratchet.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..facts.node import MEMORY, memory_of
from ..facts.queries import answer, argv
from ..fleet import Fleet
from ..inventory import Inventory
from .containers import Rank, refresh, stop_ranks
from .headapi import Endpoint
from .leak import LeakWatch
from .running import running

POLL_INTERVAL_S = 1.0  # between polls of the group
HEALTH_TIMEOUT_S = 2  # rank 0's health answer within this, or the poll counts as unhealthy
HEALTH_FAILURES_TO_ACT = 3  # consecutive unhealthy polls of rank 0 before acting
BROKEN_STOP_TIMEOUT = 3  # seconds: a broken TP group has nothing left to drain
FLOOR_FRACTION = 0.05  # warn about a ratchet heading for 5 % of MemTotal


@dataclass
class WatchReport:
    """What the watchdog saw."""

    failure: str | None = None
    warnings: list[str] = field(default_factory=list)
    acted: str | None = None  # "stopped" / "restarted"
    left_running: list[str] = field(default_factory=list)  # ranks on nodes still lost at the end


def sample_memory(fleet: Fleet) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """({node: (MemTotal kB, MemAvailable kB)}, {node: error}): one short SSH round trip per
    node that doubles as the liveness probe (a dead node fails it within the connect timeout,
    where a docker API call would wait for the command timeout)."""
    samples, lost = {}, {}
    for result in fleet.run(argv([MEMORY]), timeout=5):
        if result.status != "ok":
            lost[result.node] = result.error or result.status
            continue
        memory = memory_of(answer(result.stdout, [MEMORY]))
        if memory is None:
            lost[result.node] = "no MemTotal/MemAvailable in its answer"
        else:
            samples[result.node] = memory
    return samples, lost


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


class GroupWatch:
    """One running TP group across polls: its ranks, rank 0's consecutive health failures and
    each node's ratchet detector. `invoke watch` and the watchdog service both poll with it."""

    def __init__(self, fleet: Fleet, inventory: Inventory, ranks: list[Rank], *, http_port: int,
                 health_path: str):
        self.fleet = fleet
        self.inventory = inventory
        self.ranks = ranks
        self.http_port = http_port
        self.health_path = health_path
        self.health_failures = 0
        self.leaks: dict[str, LeakWatch] = {}

    def poll(self) -> Poll:
        """One poll: the nodes' liveness and memory, each rank's container, rank 0's health.
        Memory feeds the ratchet detectors only while the group is whole."""
        poll = Poll()
        poll.memory, poll.lost = sample_memory(self.fleet)
        if poll.lost:
            node, why = next(iter(poll.lost.items()))
            poll.failure = f"node {node} lost ({why})"
        else:
            poll.failure, poll.states, poll.head_status = self._check_ranks()
        if poll.failure:
            poll.detected = time.monotonic()
            return poll
        for node, (total, available) in poll.memory.items():
            leak = self.leaks.setdefault(node, LeakWatch(floor_kb=int(total * FLOOR_FRACTION)))
            warning = leak.feed(time.monotonic(), available)
            if warning:
                poll.warnings.append((node, warning))
        return poll

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
        status = Endpoint(self.inventory.node(head.node), self.http_port).status(
            self.health_path, timeout=HEALTH_TIMEOUT_S)
        self.health_failures = 0 if status == 200 else self.health_failures + 1
        if self.health_failures >= HEALTH_FAILURES_TO_ACT:
            return (f"rank 0 on {head.node} unhealthy ({status or 'no answer'}) for "
                    f"{self.health_failures} polls"), states, status
        return None, states, status


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
          on_event: Callable[[str], None] = lambda e: None) -> WatchReport:
    """Watch the running group until it fails (then act) or duration passes."""
    report = WatchReport()
    with Fleet(inventory) as fleet:
        ranks = running(fleet).alive
        if not ranks:
            report.failure = "no engine is running"
            return report
        on_event(f"watching {ranks[0].engine} {ranks[0].profile}: {len(ranks)} ranks")
        group = GroupWatch(fleet, inventory, ranks, http_port=http_port, health_path=health_path)
        started = time.monotonic()
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
                return report
            for node, warning in poll.warnings:
                report.warnings.append(f"{node}: {warning}")
                on_event(f"warning: {node}: {warning}")
            time.sleep(max(0.0, interval - (time.monotonic() - poll_started)))
    return report
