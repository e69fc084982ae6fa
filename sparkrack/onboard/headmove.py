"""When `onboard --replace` retires the head, the head's state moves to the new one.

The rack lock, the audit log and the deployment records live on the head (rank 0). The
lock needs nothing moved: the next task takes it on the new head. The audit log and the
records come from the old head when it still answers; else from this machine's copies
(the local audit copy, this rack's lines only, and the records' local mirror: what this
machine wrote). Lines the new head's log holds already are not added again; each is
chained anew there. `current` moves only while ranks of its deployment still run on the
members (a record of a group that is gone would say something runs); the break-glass
records left on the members are folded into the new head's log, as `down` does (once:
a break-glass run from this machine is in its audit copy already).

    source = gather(ctx)       # before join rewrites hosts.yml and forgets the old key
    lines = move(ctx, source)  # after it: what was moved, one line each
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.errors import SparkrackError
from sparkrack.facts.records import KINDS
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import record
from sparkrack.lifecycle.breakglass import fold_records
from sparkrack.lifecycle.containers import engine_containers
from sparkrack.lifecycle.record import Deployment
from sparkrack.onboard.context import Context
from sparkrack.oplock import audit
from sparkrack.oplock.lock import LockError, call
from sparkrack.oplock.remote import AUDIT_FILE


@dataclass
class Source:
    """The head's state as found: where from, its audit lines, its records."""

    where: str
    lines: list[dict]
    records: dict[str, Deployment | None]


def replaces_head(ctx: Context) -> bool:
    """The onboarding retires the rack's head."""
    return ctx.old is not None and ctx.old.name == ctx.inventory.head.name


def gather(ctx: Context) -> Source:
    """The old head's audit log and records if it answers, else this machine's copies."""
    old = ctx.old
    try:
        with Fleet(ctx.inventory, [old]) as fleet:
            records = record.read(fleet, ctx.inventory)
            log = fleet.run({old.name: ["cat", AUDIT_FILE]}, timeout=60)[old.name]
        if log.ok:
            return Source(old.name, audit.parse_lines(log.stdout), records)
    except SparkrackError:
        pass
    rack = ctx.inventory.vars.rack_name
    try:
        mine = audit.parse_lines(audit.local_path().read_text())
    except OSError:
        mine = []
    ids = {r.get("id") for r in mine if r.get("rack") == rack}
    return Source(f"this machine's copies ({audit.local_path()}, "
                  f"{record.mirror_dir(ctx.inventory)})",
                  [r for r in mine if r.get("id") in ids], record.mirrored(ctx.inventory))


def move(ctx: Context, source: Source) -> list[str]:
    """Put source's audit lines and records on the new head (ctx.fleet, ctx.work: the rack
    as joined); what was done, one line each. SparkrackError if the new head refuses."""
    new, fleet = ctx.new.name, ctx.fleet
    said = [f"{ctx.old.name} was the head: its audit log and records move to {new} "
            f"(from {source.where})"]
    have = fleet.run({new: ["sh", "-c", 'cat "$1" 2>/dev/null || true', "sh", AUDIT_FILE]},
                     timeout=60)[new]
    if not have.ok:
        raise SparkrackError(f"{new}: cannot read its audit log: {have.error}")
    present = {(r.get("id"), r.get("phase")) for r in audit.parse_lines(have.stdout)}
    lines = [audit._line({k: v for k, v in r.items() if k != audit.CHAIN})
             for r in source.lines if (r.get("id"), r.get("phase")) not in present]
    try:
        if lines:
            call(fleet, new, "append", lines=lines, timeout=60)
    except LockError as error:
        raise SparkrackError(f"{new}: the audit log not moved: {error.line()}") from None
    said.append(f"audit log: {len(lines)} line(s) added to {new}'s "
                f"({len(source.lines) - len(lines)} there already)")
    said += _records(ctx, source.records)
    moved, problems = fold_records(fleet, new, logged={i for i, _ in present}
                                   | {r.get("id") for r in source.lines})
    if moved:
        said.append(f"{moved} break-glass record(s) moved into {new}'s audit log")
    return said + problems


def _records(ctx: Context, records: dict[str, Deployment | None]) -> list[str]:
    """Write each record on the new head (or clear it there); `current` only while its
    ranks run."""
    fleet, work, said = ctx.fleet, ctx.work, []
    current = records.get("current")
    if current is not None:
        ranks, _ = engine_containers(fleet, ctx.members)
        if not [r for r in ranks if r.alive and r.deployment == current.deployment_id]:
            said.append(f"record current ({current.deployment_id}) not moved: none of its "
                        "ranks runs")
            records = {**records, "current": None}
    for kind in KINDS:
        found = records.get(kind)
        if found is None:
            record.clear(fleet, work, kind)
        else:
            record.write(fleet, work, kind, found)
            said.append(f"record {kind}: {found.describe()}")
    return said


__all__ = ["Source", "gather", "move", "replaces_head"]
