"""The rank watchdog: notice within seconds when a rank's container exits, a node is lost or
the head turns unhealthy, and stop the whole group (or restart it in order) instead of
leaving a half-dead TP group for the engine's own 300 s watchdog. While the group serves,
each node's MemAvailable is watched for the indexer-leak ratchet.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..fleet import Fleet, sh
from ..inventory import Inventory
from . import headapi
from .containers import Rank, engine_containers, refresh, stop_ranks
from .leak import LeakWatch

POLL_INTERVAL_S = 1.0  # between polls of the group
HEALTH_TIMEOUT_S = 2  # rank 0's health answer within this, or the poll counts as unhealthy
HEALTH_FAILURES_TO_ACT = 3  # consecutive unhealthy polls of rank 0 before acting
BROKEN_STOP_TIMEOUT = 3  # seconds: a broken TP group has nothing left to drain
FLOOR_FRACTION = 0.05  # warn about a ratchet heading for 5 % of MemTotal
_MEMINFO = "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"


@dataclass
class WatchReport:
    """What the watchdog saw."""

    failure: str | None = None
    warnings: list[str] = field(default_factory=list)
    acted: str | None = None  # "stopped" / "restarted"


def sample_memory(fleet: Fleet) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """({node: (MemTotal kB, MemAvailable kB)}, {node: error}): one short SSH round trip per
    node that doubles as the liveness probe (a dead node fails it within the connect timeout,
    where a docker API call would wait for the command timeout)."""
    samples, lost = {}, {}
    for result in fleet.run(sh(_MEMINFO), timeout=5):
        if result.status == "ok":
            values = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
            samples[result.node] = (int(values["MemTotal"].split()[0]),
                                    int(values["MemAvailable"].split()[0]))
        else:
            lost[result.node] = result.error or result.status
    return samples, lost


def find_failure(fleet: Fleet, inventory: Inventory, ranks: list[Rank], health_failures: int,
                 http_port: int, health_path: str) -> tuple[str | None, int]:
    """(why the group is broken or None, updated count of consecutive head health failures)."""
    states = refresh(fleet, ranks)
    dead = [r for r in states if not r.alive]
    if dead:
        r = dead[0]
        what = {"unreachable": f"node {r.node} lost ({r.error})",
                "missing": f"rank {r.rank} container on {r.node} is gone"}.get(
            r.status, f"rank {r.rank} on {r.node} {r.status} (exit code {r.exit_code})")
        return what, health_failures
    head = next(r for r in states if r.rank == 0)
    status = headapi.get_status(inventory.node(head.node), http_port, health_path,
                                timeout=HEALTH_TIMEOUT_S)
    health_failures = 0 if status == 200 else health_failures + 1
    if health_failures >= HEALTH_FAILURES_TO_ACT:
        return f"rank 0 on {head.node} unhealthy ({status or 'no answer'}) for {health_failures} polls", health_failures
    return None, health_failures


def watch(inventory: Inventory, *, http_port: int, health_path: str, duration: float | None = None,
          interval: float = POLL_INTERVAL_S, on_failure: str = "stop", restart: Callable[[], None] | None = None,
          on_event: Callable[[str], None] = lambda e: None) -> WatchReport:
    """Watch the running group until it fails (then act) or duration passes."""
    report = WatchReport()
    with Fleet(inventory) as fleet:
        ranks, _ = engine_containers(fleet)
        ranks = [r for r in ranks if r.alive]
        if not ranks:
            report.failure = "no engine is running"
            return report
        on_event(f"watching {ranks[0].engine} {ranks[0].profile}: {len(ranks)} ranks")
        leaks: dict[str, LeakWatch] = {}
        started = time.monotonic()
        health_failures = 0
        while duration is None or time.monotonic() - started < duration:
            poll_started = time.monotonic()
            memory, lost = sample_memory(fleet)
            if lost:
                node, why = next(iter(lost.items()))
                failure = f"node {node} lost ({why})"
            else:
                failure, health_failures = find_failure(fleet, inventory, ranks, health_failures,
                                                        http_port, health_path)
            if failure:
                report.failure = failure
                on_event(f"group broken: {failure}; stopping every rank")
                reachable = [r for r in ranks if r.node not in lost]
                stop_ranks(fleet, reachable, timeout=BROKEN_STOP_TIMEOUT)
                report.acted = "stopped"
                if on_failure == "restart" and restart is not None:
                    on_event("restarting the group in order")
                    restart()
                    report.acted = "restarted"
                return report
            for node, (total, available) in memory.items():
                leak = leaks.setdefault(node, LeakWatch(floor_kb=int(total * FLOOR_FRACTION)))
                warning = leak.feed(time.monotonic(), available)
                if warning:
                    report.warnings.append(f"{node}: {warning}")
                    on_event(f"warning: {node}: {warning}")
            time.sleep(max(0.0, interval - (time.monotonic() - poll_started)))
    return report
