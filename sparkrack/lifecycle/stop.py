"""Stop whatever engine runs on the rack, in order, and wait for unified memory to return.

On a GB10 the GPU and the OS share one pool: the next engine needs the memory the last one
held, so `down` is only done when every node's MemAvailable is back (to what it was before
the deployment started, when that is recorded; else to RECOVERED_FRACTION of MemTotal).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..facts import node as node_facts
from ..facts import records as record_facts
from ..facts.queries import answer, argv
from ..fleet import Fleet
from .containers import Rank, engine_containers, stop_ranks
from .record import Deployment, records_of

RECOVERED_FRACTION = 0.85
RECOVERY_SLACK_KB = 1 << 20  # 1 GiB below the recorded value still counts as recovered
RECOVERY_TIMEOUT = 60.0


@dataclass
class StopReport:
    """What `down` did and found."""

    stopped: list[Rank] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # container@node or node -> error
    not_recovered: dict[str, str] = field(default_factory=dict)  # node -> why
    seconds: float = 0.0
    current: Deployment | None = None  # the current record, when the memory wait read it


def stop_engine(fleet: Fleet, *, mem_before: dict[str, int] | None = None,
                records_on: str | None = None, timeout: int | None = None,
                on_event: Callable[[str], None] = lambda e: None,
                recovery_timeout: float = RECOVERY_TIMEOUT) -> StopReport:
    """Stop every sparkrack engine container (rank 0 first), remove them, wait for memory.
    records_on (`down`: the head) is asked for its deployment records in the memory wait's
    round trip: the current record's MemAvailable figures are then mem_before, and
    report.current that record."""
    started = time.monotonic()
    report = StopReport()
    ranks, errors = engine_containers(fleet)
    report.errors.update({node: f"docker: {e}" for node, e in errors.items()})
    if ranks:
        on_event(f"stopping {len(ranks)} rank(s): rank 0 first so it drains, then the workers")
        report.errors.update(stop_ranks(fleet, ranks, timeout=timeout,
                                        on_stop=lambda r: on_event(f"stopped rank {r.rank} on {r.node}")))
        report.stopped = ranks
        report.not_recovered, report.current = wait_memory(fleet, mem_before or {},
                                                           recovery_timeout, records_on)
    report.seconds = time.monotonic() - started
    return report


def wait_memory(fleet: Fleet, mem_before: dict[str, int], timeout: float,
                records_on: str | None = None) -> tuple[dict[str, str], Deployment | None]:
    """Poll MemAvailable until every node recovered: ({node: why} for those that did not,
    the current record). records_on is asked for its deployment records in the same round
    trip until it answers; the current record's figures then replace mem_before. A node
    that does not answer is reported and not asked again: its memory cannot be read, and
    waiting for it would hold `down` for the whole timeout."""
    deadline = time.monotonic() + timeout
    current = None
    lost: dict[str, str] = {}
    while True:
        pending = dict(lost)
        asked = {n.name: node_facts.queries() + (record_facts.queries() if n.name == records_on
                                                  else []) for n in fleet.nodes
                 if n.name not in lost}
        results = fleet.run({name: argv(queries) for name, queries in asked.items()}, timeout=15)
        if records_on in asked and results[records_on].status == "ok":
            current = records_of(answer(results[records_on].stdout, asked[records_on]))["current"]
            mem_before, records_on = current.mem_available_kb_before if current else {}, None
        for result in results:
            if result.status != "ok":
                pending[result.node] = f"{result.status}: {result.error}"
                if result.status == "unreachable":
                    lost[result.node] = pending[result.node]
                continue
            facts = node_facts.facts_of(answer(result.stdout, asked[result.node]))
            want = (mem_before.get(result.node, 0) - RECOVERY_SLACK_KB if result.node in mem_before
                    else RECOVERED_FRACTION * (facts.mem_total_kb or 0))
            have = facts.mem_available_kb or 0
            if have < want:
                pending[result.node] = (f"MemAvailable {have / 2**20:.1f} GiB, expected "
                                        f"{want / 2**20:.1f} GiB")
        if set(pending) <= set(lost) or time.monotonic() > deadline:
            return pending, current
        time.sleep(0.5)
