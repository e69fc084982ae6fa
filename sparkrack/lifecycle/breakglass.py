"""Break-glass: stop every reachable engine when the head is gone for good, without the lock,
recorded here and on each node reached (docs/operators.md#break-glass-the-head-is-gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkrack.core.errors import UsageError
from sparkrack.deployments.ranks import Rank, engine_containers
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.headgone import GRACE_S, confirm_gone
from sparkrack.lifecycle.stop import HEADLESS_STOP_TIMEOUT, stop_ranks
from sparkrack.oplock import audit
from sparkrack.oplock.breakfold import BREAK_GLASS_DIR, TASK
from sparkrack.oplock.remote import lock_argv, parse_reply

WORKER_STOP_TIMEOUT = HEADLESS_STOP_TIMEOUT  # SIGTERM, then SIGKILL: no rank 0 to drain them


@dataclass
class BreakGlassReport:
    """What break_glass did: the ranks stopped, the nodes it could not reach, problems."""

    head: str
    stopped: list[Rank] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> why
    errors: dict[str, str] = field(default_factory=dict)  # container@node or node -> error
    seconds: float = 0.0

    @property
    def outcome(self) -> str:
        return "failed" if self.errors else "ok"


def break_glass(inventory: Inventory, reason: str, *, timeout: int = WORKER_STOP_TIMEOUT,
                grace: float = GRACE_S,
                on_event: Callable[[str], None] = lambda e: None) -> BreakGlassReport:
    """Stop every engine container on the nodes that answer, the head having answered
    nothing for grace seconds. UsageError without a reason; HeadNotGone (nothing stopped)
    while the head answers, refuses this machine, or the workers still reach it."""
    if not reason.strip():
        raise UsageError("break-glass needs a reason", fix="invoke break-glass 'spark-01 lost "
                         "power; workers hold memory' (it goes into the audit record)")
    started = time.monotonic()
    head = inventory.head.name
    record = audit.new_record(inventory, TASK, {"reason": reason, "timeout": timeout,
                                                "grace": grace})
    report = BreakGlassReport(head=head)
    gone = confirm_gone(inventory, grace=grace, on_event=on_event)
    report.unreachable = {head: gone.look.here.why, **gone.look.missing}
    reached = [node for node in inventory.nodes if node.name in gone.look.seen]
    on_event(f"{head} (the head) does not answer, here or from {len(reached)} worker(s), for "
             f"{gone.seconds:.0f} s: {gone.look.here.why}")
    record.note(head_silent_s=round(gone.seconds, 1))
    if reached:
        with Fleet(inventory, reached) as fleet:
            ranks, errors = engine_containers(fleet)
            report.errors.update({node: f"docker: {e}" for node, e in errors.items()})
            if ranks:
                on_event(f"stopping {len(ranks)} rank(s) on {len(reached)} node(s), "
                         f"SIGKILL after {timeout} s")
            report.errors.update(stop_ranks(
                fleet, ranks, timeout=timeout,
                on_stop=lambda r: on_event(f"stopped rank {r.rank} on {r.node}")))
            report.stopped = [r for r in ranks if f"{r.name}@{r.node}" not in report.errors]
            record.note(reason=reason, containers=[f"{r.name}@{r.node}" for r in report.stopped],
                        nodes=sorted({r.node for r in report.stopped}),
                        unreachable=sorted(report.unreachable))
            line = record.done_line(report.outcome, error=_error_text(report))
            _record_on_nodes(fleet, line, report, on_event)
    else:
        record.note(reason=reason, unreachable=sorted(report.unreachable))
        line = record.done_line("failed", error="no node answered")
        report.errors["rack"] = "no node answered"
    local = audit.append_local(line)
    if local:
        report.errors["audit"] = local
    report.seconds = time.monotonic() - started
    return report


def _error_text(report: BreakGlassReport) -> str | None:
    if not report.errors:
        return None
    return "; ".join(f"{where}: {why}" for where, why in sorted(report.errors.items()))


def _record_on_nodes(fleet: Fleet, line: str, report: BreakGlassReport,
                     on_event: Callable[[str], None]) -> None:
    """Append the record's line to BREAK_GLASS_FILE on every reached node, chained (the
    lock script's `append` in BREAK_GLASS_DIR, the line on its stdin)."""
    argv = lock_argv("append", directory=BREAK_GLASS_DIR)
    for result in fleet.run(argv, stdin=(line + "\n").encode(), timeout=15):
        reply = parse_reply(result.stdout)
        if not result.ok or reply.status != "APPENDED":
            why = reply.error if reply.status == "ERROR" and result.stdout.strip() else \
                result.error or result.status
            report.errors[f"record@{result.node}"] = why
            on_event(f"{result.node}: the break-glass record was not written: {why}")


__all__ = ["BreakGlassReport", "break_glass"]
