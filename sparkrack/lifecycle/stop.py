"""Stop whatever engine runs on the rack, in order, and wait for unified memory to return.

On a GB10 the GPU and the OS share one pool: the next engine needs the memory the last one
held, so `down` is only done when every node's MemAvailable is back (to what it was before
the deployment started, when that is recorded; else to RECOVERED_FRACTION of MemTotal).
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkrack.deployments.ranks import Rank, engine_containers, first_line, parallel
from sparkrack.deployments.record import Deployment
from sparkrack.facts import node as node_facts
from sparkrack.facts.queries import answer, argv
from sparkrack.fleet import Fleet
from sparkrack.fleet.containers import ContainerNotFound
from sparkrack.lifecycle.drain import Drain, drain_head
from sparkrack.lifecycle.order import stop_order

RECOVERED_FRACTION = 0.85
RECOVERY_SLACK_KB = 1 << 20  # 1 GiB below the recorded value still counts as recovered
RECOVERY_TIMEOUT = 60.0
HEADLESS_STOP_TIMEOUT = 10  # a worker without a running rank 0: SIGTERM this long, then SIGKILL
AFTER_DRAIN_TIMEOUT = 30  # rank 0 once its drain ended: its exit (SGLang's schedulers: 15 s)


@dataclass
class StopReport:
    """What `down` did and found."""

    stopped: list[Rank] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # container@node or node -> error
    not_recovered: dict[str, str] = field(default_factory=dict)  # node -> why
    seconds: float = 0.0
    current: Deployment | None = None  # `down`, `roll`: the current record as it was
    drain: Drain | None = None  # rank 0's drain, when it ran


def stop_engine(fleet: Fleet, *, mem_before: dict[str, int] | None = None,
                timeout: int | None = None, on_event: Callable[[str], None] = lambda e: None,
                recovery_timeout: float = RECOVERY_TIMEOUT) -> StopReport:
    """Stop every sparkrack engine container (rank 0 first), remove them, wait for memory
    (back to mem_before's figures where given)."""
    started = time.monotonic()
    report = stop_group(fleet, timeout=timeout, on_event=on_event)
    if report.stopped:
        report.not_recovered = wait_memory(fleet, mem_before or {}, recovery_timeout)
    report.seconds = time.monotonic() - started
    return report


def stop_group(fleet: Fleet, *, timeout: int | None = None,
               on_event: Callable[[str], None] = lambda e: None,
               drain: bool = True) -> StopReport:
    """Stop and remove every sparkrack engine container, rank 0 first (no memory wait). With
    drain, a running rank 0 first drains (drain.py: SIGTERM, its in-flight requests finish
    within the inventory's drain_budget_s), then gets AFTER_DRAIN_TIMEOUT to exit."""
    started = time.monotonic()
    report = StopReport()
    ranks, errors = engine_containers(fleet)
    report.errors.update({node: f"docker: {e}" for node, e in errors.items()})
    head = next((r for r in ranks if r.rank == 0 and r.alive), None)
    if ranks:
        on_event(f"stopping {len(ranks)} rank(s): rank 0 first so it drains, then the workers")
        if drain and head is not None:
            report.drain = drain_head(fleet, head, on_event=on_event)
        report.errors.update(stop_ranks(
            fleet, ranks, timeout=timeout,
            head_timeout=AFTER_DRAIN_TIMEOUT if report.drain is not None else None,
            on_stop=lambda r: on_event(f"stopped rank {r.rank} on {r.node}")))
        report.stopped = ranks
    report.seconds = time.monotonic() - started
    return report


def stop_ranks(fleet: Fleet, ranks: Sequence[Rank], *, timeout: int | None = None,
               remove: bool = True, on_stop: Callable[[Rank], None] = lambda r: None,
               head_timeout: int | None = None) -> dict[str, str]:
    """Stop (and remove) ranks in stop order: rank 0 first, then the workers in parallel.
    Returns {container@node: error} for those that could not be stopped or removed.

    Workers exit when their rank 0 tells them (SGLang's only log SIGTERM): when no rank 0
    runs among ranks (its node lost power, it was stopped before), nothing will, and each
    gets at most HEADLESS_STOP_TIMEOUT seconds of SIGTERM before SIGKILL."""
    errors: dict[str, str] = {}
    headless = not any(r.rank == 0 and r.alive for r in ranks)

    def one(rank: Rank) -> None:
        wait = timeout if timeout is not None else rank.stop_timeout
        if rank.rank == 0 and head_timeout is not None:  # drained already
            wait = min(wait, head_timeout)
        if headless:
            wait = min(wait, HEADLESS_STOP_TIMEOUT)
        try:
            node = fleet.docker(rank.node)
            node.stop(rank.name, timeout=wait)
            on_stop(rank)
            if remove:
                node.remove(rank.name)
        except ContainerNotFound:
            on_stop(rank)
        except Exception as exc:
            errors[f"{rank.name}@{rank.node}"] = first_line(exc)

    for wave in stop_order(list(ranks), lambda r: r.rank):
        parallel(wave, one)
    return errors


def wait_memory(fleet: Fleet, mem_before: dict[str, int], timeout: float) -> dict[str, str]:
    """Poll MemAvailable until every node recovered: {node: why} for those that did not. A
    node that does not answer is reported and not asked again: its memory cannot be read,
    and waiting for it would hold `down` for the whole timeout."""
    deadline = time.monotonic() + timeout
    lost: dict[str, str] = {}
    queries = node_facts.queries()
    while True:
        pending = dict(lost)
        results = fleet.run({n.name: argv(queries) for n in fleet.nodes if n.name not in lost},
                            timeout=15)
        for result in results:
            if result.status != "ok":
                pending[result.node] = f"{result.status}: {result.error}"
                if result.status == "unreachable":
                    lost[result.node] = pending[result.node]
                continue
            facts = node_facts.facts_of(answer(result.stdout, queries))
            want = (mem_before.get(result.node, 0) - RECOVERY_SLACK_KB if result.node in mem_before
                    else RECOVERED_FRACTION * (facts.mem_total_kb or 0))
            have = facts.mem_available_kb or 0
            if have < want:
                pending[result.node] = (f"MemAvailable {have / 2**20:.1f} GiB, expected "
                                        f"{want / 2**20:.1f} GiB")
        if set(pending) <= set(lost) or time.monotonic() > deadline:
            return pending
        time.sleep(0.5)
