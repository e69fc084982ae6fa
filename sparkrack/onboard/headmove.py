"""When `onboard --replace` retires the head, the head's state moves to the new one: the
audit log, verified and tied to the old chain, and the records
(docs/onboarding.md#replacing-the-head).

    source = gather(ctx)       # before join rewrites hosts.yml and forgets the old key
    for line in move(ctx, source):  # after it: what was moved, one line each
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.ranks import engine_containers
from sparkrack.deployments.record import Deployment
from sparkrack.facts.records import KINDS
from sparkrack.fleet import Fleet
from sparkrack.onboard.context import Context
from sparkrack.oplock import audit
from sparkrack.oplock.breakfold import fold_records
from sparkrack.oplock.lock import LockError, call
from sparkrack.oplock.remote import AUDIT_FILE, LOCK_DIR

TASK = "head-move"
MOVED_FILE = LOCK_DIR + "/audit.from-{old}.jsonl"  # an old head's log that did not verify


@dataclass
class Source:
    """The head's state as found: where from, its audit lines, its records, and the whole
    log the lines came from (as read: to verify, and to keep)."""

    where: str
    lines: list[dict]
    records: dict[str, Deployment | None]
    text: str = ""
    from_head: bool = False  # read from the old head (else this machine's copies)


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
            return Source(old.name, audit.parse_lines(log.stdout), records, log.stdout, True)
    except SparkrackError:
        pass
    rack = ctx.inventory.vars.rack_name
    try:
        text = audit.local_path().read_text()
    except OSError:
        text = ""
    mine = audit.parse_lines(text)
    ids = {r.get("id") for r in mine if r.get("rack") == rack}
    return Source(f"this machine's copies ({audit.local_path()}, "
                  f"{record.mirror_dir(ctx.inventory)})",
                  [r for r in mine if r.get("id") in ids], record.mirrored(ctx.inventory), text)


def move(ctx: Context, source: Source) -> Iterator[str]:
    """Put source's audit lines and records on the new head (ctx.fleet, ctx.work: the rack
    as joined), saying what was done, one line at a time. SparkrackError if the new head
    refuses, or (once the rest moved) when source's log does not verify."""
    old, new, fleet = ctx.old.name, ctx.new.name, ctx.fleet
    yield (f"{old} was the head: its audit log and records move to {new} "
           f"(from {source.where})")
    have = fleet.run({new: ["sh", "-c", 'cat "$1" 2>/dev/null || true', "sh", AUDIT_FILE]},
                     timeout=60)[new]
    if not have.ok:
        raise SparkrackError(f"{new}: cannot read its audit log: {have.error}")
    check = audit.verify_chain(source.text)
    verdict = check.describe(f"{old}, from {source.where}" if not source.from_head else old)
    kept = _keep_whole(ctx, source) if not check.ok else None
    present = {(r.get("id"), r.get("phase")) for r in audit.parse_lines(have.stdout)}
    lines = [audit._line(r) for r in source.lines
             if (r.get("id"), r.get("phase")) not in present] if check.ok else []
    try:
        call(fleet, new, "append", lines=[_move_line(ctx, check, verdict, source, kept, lines),
                                          *lines], timeout=60)
    except LockError as error:
        raise SparkrackError(f"{new}: the audit log not moved: {error.line()}") from None
    yield verdict
    if check.ok:
        yield (f"audit log: {len(lines)} line(s) added to {new}'s "
               f"({len(source.lines) - len(lines)} there already), after the head-move "
               f"record that carries the old chain's tip")
    yield from _records(ctx, source.records)
    moved, problems = fold_records(fleet, new, logged={i for i, _ in present}
                                   | {r.get("id") for r in source.lines})
    if moved:
        yield f"{moved} break-glass record(s) moved into {new}'s audit log"
    yield from problems
    if not check.ok:
        raise SparkrackError(
            f"{old}'s audit log does not verify, so none of it was chained into {new}'s: "
            f"{verdict}", fix=(f"kept whole as {kept} on {new}; " if kept else "")
            + f"{new}'s log says so in its head-move record; compare with the operators' "
            "local copies (invoke log --local --verify)")


def _move_line(ctx: Context, check: audit.ChainCheck, verdict: str, source: Source,
               kept: str | None, lines: list[str]) -> str:
    """The head-move record: where the log came from, its verdict and its chain's tip."""
    entry = audit.new_record(ctx.work, TASK, {"replaced": ctx.old.name, "by": ctx.new.name})
    entry.note(source=source.where, old_chain=verdict, old_chain_tip=audit.chain_tip(
        source.text), old_lines=check.lines, lines_moved=len(lines), kept_whole=kept)
    return entry.done_line("ok" if check.ok else "failed",
                           error=None if check.ok else f"not moved: {verdict}")


def _keep_whole(ctx: Context, source: Source) -> str | None:
    """The old head's log as it was read, put beside the new head's (0600), where it can be
    examined; its path (None for this machine's copy: that stays here)."""
    if not source.from_head:
        return None
    path = MOVED_FILE.format(old=ctx.old.name)
    put = ctx.fleet.put({ctx.new.name: [(source.text.encode(), path, 0o600)]}, timeout=60)
    if not put[ctx.new.name].ok:
        raise SparkrackError(f"{ctx.new.name}: {path} not written: {put[ctx.new.name].error}")
    return path


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


__all__ = ["MOVED_FILE", "TASK", "Source", "gather", "move", "replaces_head"]
