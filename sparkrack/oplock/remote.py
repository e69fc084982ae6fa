"""The rack lock's node side: the lock script (remote/lock.sh) run on the head, and the
parser of its replies (its state, operations and replies:
docs/internals.md#the-lock-script).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from sparkrack.remote import text

LOCK_DIR = "/var/lib/sparkrack"
LOCK_FILE = f"{LOCK_DIR}/lock.json"
AUDIT_FILE = f"{LOCK_DIR}/audit.jsonl"


def lock_argv(op: str, *args: str, directory: str | None = None) -> list[str]:
    """argv running one lock operation on the head node, in directory, else
    $SPARKRACK_LOCK_DIR (for tests on a loopback "head" that is this machine), else LOCK_DIR."""
    where = directory or os.environ.get("SPARKRACK_LOCK_DIR") or LOCK_DIR
    return ["sh", "-c", text("lock"), "sparkrack-lock", op, where, *args]


def holder_json(fields: dict) -> str:
    """The lock file's JSON from the holder's fields: compact, starting with `{` (the node
    puts `"since":NOW,` in front), token written exactly as the script greps for it."""
    return json.dumps(fields, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, as the head node sees it."""

    token: str
    operator: str
    pid: int | None
    task: str
    command: str
    since: float  # node clock
    age: float  # seconds since the last heartbeat (node clock), negative while leased
    node_now: float
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, age: str, text: str, node_now: float) -> Holder:
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(token=str(data.get("token", "")), operator=str(data.get("operator", "?")),
                   pid=data.get("pid") if isinstance(data.get("pid"), int) else None,
                   task=str(data.get("task", "?")), command=str(data.get("command", "")),
                   since=float(data.get("since", node_now) or node_now), age=float(age),
                   node_now=node_now, raw=data)

    @property
    def held_for(self) -> float:
        """Seconds since the lock was taken (node clock)."""
        return max(0.0, self.node_now - self.since)

    def since_local(self, local_now: float) -> float:
        """When the lock was taken, in this machine's clock (the node's skew removed)."""
        return local_now - self.held_for

    def describe(self, local_now: float) -> str:
        """'alice@laptop (pid 42) running `up --engine sglang` since 14:02:31 (75 s ago;
        last heartbeat 2 s ago)'."""
        import time

        pid = f" (pid {self.pid})" if self.pid else ""
        when = time.strftime("%H:%M:%S", time.localtime(self.since_local(local_now)))
        beat = (f"last heartbeat {self.age:.0f} s ago" if self.age >= 0
                else f"heartbeat leased for {-self.age:.0f} s more")
        return (f"{self.operator}{pid} running `{self.command or self.task}` since {when} "
                f"({self.held_for:.0f} s ago; {beat})")

    def as_dict(self) -> dict:
        return {**self.raw, "token": self.token, "heartbeat_age_s": self.age,
                "held_for_s": self.held_for}


@dataclass(frozen=True)
class Reply:
    """One lock operation's answer."""

    status: str  # TAKEN HELD OK LOST ... or ERROR
    node_now: float = 0.0
    holder: Holder | None = None  # the lock as it is (HOLDER line)
    stale: Holder | None = None  # the stale lock a take replaced
    error: str = ""
    audit: str = ""  # after AUDIT (op log)


def parse_reply(stdout: str) -> Reply:
    """A Reply from the script's output (status ERROR if it has no status word)."""
    lines = stdout.splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if line.rstrip("\n") == "AUDIT"), len(lines))
    audit = "".join(lines[cut + 1:])
    now, holder, stale, status, error = 0.0, None, None, "", ""
    for line in lines[:cut]:
        word, _, rest = line.rstrip("\n").partition(" ")
        if word == "NOW":
            now = float(rest or 0)
        elif word in ("HOLDER", "STALE"):
            age, _, text = rest.partition(" ")
            parsed = Holder.parse(age, text, now)
            holder, stale = (parsed, stale) if word == "HOLDER" else (holder, parsed)
        elif word == "ERROR":
            status, error = "ERROR", rest
        elif word.isalpha() and word.isupper() and not rest and not status:
            status = word
    return Reply(status or "ERROR", now, holder, stale,
                 error or ("" if status else "no answer from the lock script"), audit)
