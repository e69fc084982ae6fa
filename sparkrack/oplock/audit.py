"""The audit log: one JSON object per line, appended, never rewritten, on the head and in a
local copy; start and end records, `note()` for what changed, the hash chain and its check
(docs/operators.md#the-audit-log). Secrets are masked in one place: masking.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sparkrack.oplock.identity import inventory_digest, operator, state_dir
from sparkrack.oplock.masking import mask, mask_text

OUTCOMES = ("ok", "failed", "refused", "interrupted")


def command_line(task: str, args: Mapping) -> str:
    """The task as its operator would type it (masked): `up --engine sglang --profile 512k`.
    Arguments left at a false value (None, False, "") are left out, and the inventory (the
    record has it, resolved)."""
    words = [task]
    for name, value in args.items():
        if value in (None, False, "", [], ()) or name == "inventory":
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                words += [flag, str(mask(item, name))]
        else:
            words += [flag, str(mask(value, name))]
    return shlex.join(words)


def _now() -> tuple[str, float]:
    ts = time.time()
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds"), round(ts, 3)


def _line(data: Mapping) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, default=str)


@dataclass
class Record:
    """One task's audit record while it runs."""

    id: str
    start: dict
    started: float = field(default_factory=time.monotonic)
    changed: dict = field(default_factory=dict)
    waivers: dict = field(default_factory=dict)
    overrides: list = field(default_factory=list)
    lock: dict = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def task(self) -> str:
        return self.start["task"]

    @property
    def command(self) -> str:
        return self.start["command"]

    def start_line(self) -> str:
        """The start record, one JSON line."""
        return _line(self.start)

    def end(self, outcome: str, *, error: str | None = None, exit_code: int = 0) -> dict:
        """The end record (phase "end")."""
        when, ts = _now()
        with self._guard:
            data = {"id": self.id, "phase": "end", "time": when, "ts": ts, "outcome": outcome,
                    "duration_s": round(time.monotonic() - self.started, 3),
                    "exit_code": exit_code, "error": mask_text(error) if error else None,
                    "changed": mask(self.changed), "waivers": mask(self.waivers),
                    "overrides": mask(self.overrides), "lock": self.lock}
        return data

    def end_line(self, outcome: str, **kwargs) -> str:
        return _line(self.end(outcome, **kwargs))

    def done_line(self, outcome: str, **kwargs) -> str:
        """The one line of a task that ran without the lock (`invoke run`): start and end."""
        return _line({**self.start, **self.end(outcome, **kwargs)})

    def refused_line(self, error: str, exit_code: int = 3) -> str:
        """The one line of a task refused at the lock: start fields and the outcome."""
        return _line({**self.start, **self.end("refused", error=error, exit_code=exit_code)})

    def note(self, **items) -> None:
        """Merge what changed: lists (nodes, files, containers, ...) as sorted sets, waivers
        (dict), overrides (list), anything else replaced (deployment=...)."""
        with self._guard:
            for key, value in items.items():
                if value is None:
                    continue
                if key == "waivers":
                    self.waivers.update(value)
                elif key == "overrides":
                    self.overrides += [v for v in value if v not in self.overrides]
                elif isinstance(value, (list, tuple, set)):
                    self.changed[key] = sorted(set(self.changed.get(key, ())) | set(value))
                else:
                    self.changed[key] = value


def new_record(inventory, task: str, args: Mapping, *, token: str | None = None) -> Record:
    """The record of a task about to run on inventory (arguments masked here)."""
    token = token or uuid.uuid4().hex
    masked = {k: mask(v, k) for k, v in args.items()}
    when, ts = _now()
    return Record(token, {
        "id": token, "phase": "start", "time": when, "ts": ts, "operator": operator(),
        "pid": os.getpid(), "task": task, "args": masked, "command": command_line(task, args),
        "inventory": str(Path(inventory.path).resolve()),
        "inventory_digest": inventory_digest(inventory.path),
        "rack": inventory.vars.rack_name, "head": inventory.head.name})


# --- The active record ------------------------------------------------------------------

_active: Record | None = None


@contextmanager
def active(record: Record) -> Iterator[Record]:
    """Make record the one note() adds to, for the block."""
    global _active
    previous, _active = _active, record
    try:
        yield record
    finally:
        _active = previous


def note(**items) -> None:
    """Tell the running task's audit record what changed (no-op outside a changing task):
    nodes=[...], files=[...], containers=[...], deployment="...", waivers={...},
    overrides=[...], or any other key."""
    if _active is not None:
        _active.note(**items)


# --- Local copy -----------------------------------------------------------------------------


def local_path() -> Path:
    return state_dir() / "audit.jsonl"


def append_local(*lines: str) -> str | None:
    """Append lines to the local copy (0600), chained, one O_APPEND write each, under a
    flock (tasks on this machine append in turn); the problem, or None."""
    path = local_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            previous = _last_line(fd)
            for line in lines:
                previous = chain(previous, line)
                os.write(fd, previous.encode() + b"\n")
        finally:
            os.close(fd)
    except OSError as error:
        return f"cannot append to {path}: {error.strerror or error}"
    return None


def _last_line(fd: int) -> str:
    """The last line of the open file fd (without its newline; "" if empty)."""
    size, block = os.fstat(fd).st_size, 1 << 16
    while True:
        start = max(0, size - block)
        data = os.pread(fd, size - start, start)
        body = data[:-1] if data.endswith(b"\n") else data
        cut = body.rfind(b"\n")
        if cut >= 0 or start == 0:
            return body[cut + 1:].decode(errors="replace")
        block *= 4


# --- The chain ------------------------------------------------------------------------------

CHAIN = "prev"


def line_hash(line: str) -> str:
    """SHA-256 of a line's text (without its newline), as `sha256sum` prints it."""
    return hashlib.sha256(line.encode()).hexdigest()


def chain_tip(text: str) -> str:
    """The hash a line appended to the log text would carry: its last line's (of "" when
    empty). Recorded elsewhere, it ties what follows to the log as it was."""
    lines = text.rstrip("\n").rsplit("\n", 1)
    return line_hash(lines[-1] if text.strip() else "")


def chain(previous: str, line: str) -> str:
    """line (a JSON object) with `"prev":SHA-256 of previous` put first, as lock.sh does."""
    return f'{{"{CHAIN}":"{line_hash(previous)}",{line[1:]}'


@dataclass(frozen=True)
class ChainCheck:
    """What verify_chain found in a log."""

    lines: int  # lines in the log
    unchained: int  # lines before the first chained one (written before the chain)
    broken: int | None = None  # the first line (1-based) that does not follow its predecessor
    why: str = ""

    @property
    def ok(self) -> bool:
        """Intact, and something was verified (an empty log is intact too)."""
        return self.broken is None and (self.unchained < self.lines or not self.lines)

    def describe(self, source: str) -> str:
        """One line saying the verdict."""
        if self.broken is not None:
            return f"audit log ({source}): line {self.broken} {self.why}"
        if self.lines and self.unchained == self.lines:
            return (f"audit log ({source}): none of its {self.lines} lines is chained "
                    "(written before sparkrack chained the log): nothing could be verified")
        first = "line 1 was" if self.unchained == 1 else f"lines 1-{self.unchained} were"
        before = (f"; {first} written before the chain and not verified" if self.unchained
                  else "")
        verified = self.lines - self.unchained
        return f"audit log ({source}): the chain holds: {verified} line(s) verified{before}"


def verify_chain(text: str) -> ChainCheck:
    """Check that every line from the first chained one on carries the hash of the line
    before it. A line without "prev" after the chain began, or whose "prev" is not its
    predecessor's hash, is where the log was edited (that line or the one before it),
    added to by hand, or had a line removed. The last line can be edited, or lines cut off
    the end, without breaking the chain: compare with another copy for those."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    previous, unchained = "", 0
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        prev = data.get(CHAIN) if isinstance(data, dict) else None
        if prev is None and unchained == number - 1:
            unchained += 1  # still in the prefix written before the chain
        elif prev is None:
            return ChainCheck(len(lines), unchained, number, "carries no chain field: added or "
                              "rewritten by hand after the chain began")
        elif prev != line_hash(previous):
            why = (f"does not follow line {number - 1}: one of them was edited, or lines were "
                   "removed or inserted between them" if number > 1 else
                   "does not start the log: lines before it were removed")
            return ChainCheck(len(lines), unchained, number, why)
        previous = line
    return ChainCheck(len(lines), unchained)


def log_unlocked(fleet, record: Record, outcome: str, **kwargs) -> list[str]:
    """Append record, done, to the head's log (through fleet) and the local copy, for a
    task that takes no lock; the problems met (the task's own outcome stands)."""
    from sparkrack.oplock.lock import LockError, call

    line = record.done_line(outcome, **kwargs)
    problems = []
    try:
        call(fleet, record.start["head"], "append", lines=[line])
    except LockError as error:
        problems.append(f"audit: not logged on the head: {error.line()}")
    local = append_local(line)
    return problems + ([f"audit: {local}"] if local else [])


# --- Reading ------------------------------------------------------------------------------


def parse_lines(text: str) -> list[dict]:
    """The JSON objects of an audit log's lines (a damaged line is skipped)."""
    records = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("id"):
            data.pop(CHAIN, None)  # the chain's, not the record's
            records.append(data)
    return records


def merge(records: Iterable[dict], running: Iterable[str] = ()) -> list[dict]:
    """One entry per task, in start order: its start and end records merged. A task
    without an end record is "running" if its id holds the lock now (running), else
    "interrupted"."""
    running = set(running)
    tasks: dict[str, dict] = {}
    for data in records:
        entry = tasks.setdefault(data["id"], {})
        ending = data.get("phase") == "end" and "time" in entry  # after its start record
        if ending:
            entry.setdefault("ended", data.get("time"))
        for key, value in data.items():
            if key != "phase" and not (ending and key in ("time", "ts")):
                entry[key] = value
        entry["complete"] = entry.get("complete", False) or data.get("phase") == "end"
    for token, entry in tasks.items():
        if not entry["complete"]:
            entry["outcome"] = "running" if token in running else "interrupted"
            entry.setdefault("error", None if token in running else
                             "no end record: the task was killed or lost its connection")
    return sorted(tasks.values(), key=lambda e: e.get("ts") or 0)


def select(entries: Iterable[dict], *, since: float | None = None,
           task: str | None = None) -> list[dict]:
    """Entries started at or after since, of task (a name, `-` and `_` alike)."""
    wanted = task.replace("_", "-") if task else None
    return [e for e in entries
            if (since is None or (e.get("ts") or 0) >= since)
            and (wanted is None or str(e.get("task", "")).replace("_", "-") == wanted)]


def changed_summary(changed: Mapping | None) -> str:
    """What changed in a few words: 'deployment X; 8 nodes; 3 files; 8 containers'."""
    if not changed:
        return ""
    parts = []
    for key, value in sorted(changed.items(), key=lambda kv: (kv[0] != "deployment", kv[0])):
        if isinstance(value, (list, tuple)):
            if value:
                items = [str(v) for v in value]
                parts.append(f"{key} {', '.join(items)}" if len(items) <= 2
                             else f"{len(items)} {key}")
        elif isinstance(value, Mapping):
            parts.append(f"{key} {', '.join(f'{k}={v}' for k, v in value.items())}"[:80])
        elif value not in (None, ""):
            parts.append(f"{key} {value}")
    return "; ".join(parts)


def duration_text(seconds) -> str:
    if seconds is None:
        return ""
    return str(timedelta(seconds=round(seconds))) if seconds >= 60 else f"{seconds:.1f} s"
