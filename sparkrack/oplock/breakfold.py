"""The nodes' break-glass records folded into the head's audit log, once the head is back
(`invoke down`, or the new head of `onboard --replace`).

A worker's file is the worker's word, so nothing of it enters the head's chain unchecked:

- each node's BREAK_GLASS_FILE must verify as a hash chain (the lock script chained it when
  break-glass appended): a node whose file does not is left as it is and named;
- only break-glass records are folded (a record of another task is refused and named);
- each folded record is masked (audit.mask, as every audit line is) and marked with the
  nodes it came from (`folded_from`); one id whose copies differ between nodes is folded
  once per version, each with its own nodes, and said;
- records whose id the head's log holds already are not added again; a node's file is
  removed once all its records are in the head's log.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from sparkrack.fleet import Fleet
from sparkrack.oplock import audit
from sparkrack.oplock.lock import LockError, call
from sparkrack.oplock.remote import LOCK_DIR

BREAK_GLASS_DIR = f"{LOCK_DIR}/break-glass"  # on every node reached: the lock script's files
BREAK_GLASS_FILE = f"{BREAK_GLASS_DIR}/audit.jsonl"  # its log name: appended there, chained
TASK = "break-glass"  # the task of break-glass's records, the only ones folded
FROM = "folded_from"  # the nodes whose break-glass file held the record
Versions = dict[str, dict[str, list[str]]]  # id -> {the record as canonical JSON: its nodes}


def fold_records(fleet: Fleet, head: str, *, logged: Collection[str] = ()
                 ) -> tuple[int, list[str]]:
    """Append the break-glass records found on the fleet's nodes to head's audit log (oldest
    first; those whose id is in logged are there already), then remove the files all of
    whose records are there: (records moved, the problems met; what was not moved stays on
    its node)."""
    found = fleet.run(["sh", "-c", 'cat "$1" 2>/dev/null || true', "sh", BREAK_GLASS_FILE],
                      timeout=15)
    texts = {r.node: r.stdout for r in found if r.ok and r.stdout.strip()}
    if not texts:
        return 0, []
    versions, problems, holders = collect(texts)
    lines = [audit._line(record) for record in fold(versions, problems)
             if record.get("id") not in logged]
    try:
        if lines:
            call(fleet, head, "append", lines=lines)
    except LockError as error:
        return 0, [f"break-glass records not moved to {head}'s audit log: {error.line()}"]
    done = fleet.run({node: ["rm", "-f", BREAK_GLASS_FILE] for node in holders},
                     timeout=15) if holders else ()
    return len(lines), problems + [f"{r.node}: break-glass record not removed: {r.error}"
                                   for r in done if not r.ok]


def collect(texts: dict[str, str]) -> tuple[Versions, list[str], list[str]]:
    """From each node's file text: the Versions of its records, the problems, and the nodes
    whose files were folded whole (to be removed)."""
    versions: Versions = {}
    problems, holders = [], []
    for node, text in sorted(texts.items()):
        check = audit.verify_chain(text)
        if not check.ok:
            problems.append(f"{node}: its break-glass records were not folded (left in "
                            f"{BREAK_GLASS_FILE}): "
                            f"{check.describe(f'{node}:{BREAK_GLASS_FILE}')}")
            continue
        whole = True
        for record in audit.parse_lines(text):
            if record.get("task") != TASK:
                problems.append(f"{node}: a record of task {record.get('task')!r} in "
                                f"{BREAK_GLASS_FILE} (id {record.get('id')}) was not folded")
                whole = False
                continue
            canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
            versions.setdefault(record["id"], {}).setdefault(canonical, []).append(node)
        if whole:
            holders.append(node)
    return versions, problems, holders


def fold(versions: Versions, problems: list[str]) -> list[dict]:
    """The records to append, masked and marked with their nodes, oldest first; a problem
    said for each id whose copies differ."""
    records = []
    for ident, copies in versions.items():
        if len(copies) > 1:
            problems.append(f"break-glass record {ident} differs between nodes ("
                            + "; ".join(", ".join(nodes) for nodes in copies.values())
                            + "): each version folded, marked with its nodes")
        for canonical, nodes in copies.items():
            records.append({**audit.mask(json.loads(canonical)), FROM: sorted(nodes)})
    return sorted(records, key=lambda r: (r.get("ts") or 0, r[FROM]))


__all__ = ["BREAK_GLASS_DIR", "BREAK_GLASS_FILE", "FROM", "TASK", "fold_records"]
