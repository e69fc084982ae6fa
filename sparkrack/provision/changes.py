"""What a plan is made of: one `Change` per task, carrying the actions that would make it so.

`Put` a file (atomic), `Run` an argv (both applied on the node by apply.py), `Transfer` an
image (applied across nodes by the image distribution, sparkrack/transfer/images.py, where
`ImageTarget`, the one right image for a ref resolved for the whole rack, is defined).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sparkrack.transfer.images import short_id

Status = Literal["ok", "changed", "failed", "skipped", "pending"]


@dataclass(frozen=True)
class Put:
    """Write content to path with mode (beside it, then renamed over it)."""

    path: str
    content: bytes = field(repr=False)
    mode: int

    def describe(self) -> str:
        return f"write {self.path} ({self.mode:04o})"


@dataclass(frozen=True)
class Run:
    """Run one argv on the node (shown as `shown` when the argv is a wrapper script)."""

    argv: tuple[str, ...]
    shown: str = ""

    def describe(self) -> str:
        return self.shown or " ".join(self.argv)


@dataclass(frozen=True)
class Transfer:
    """Bring image ref with image_id onto the node (without a registry)."""

    ref: str
    image_id: str
    source: str  # "tar:PATH" or "node:NAME"

    def describe(self) -> str:
        return f"load {self.ref} ({short_id(self.image_id)}) from {self.source}"


Action = Put | Run | Transfer


@dataclass(frozen=True)
class Change:
    """One task's outcome on one node: what it found, what it would do.

    deferred: a change planned after every task on behalf of earlier ones (systemd's
    daemon-reload), not a task of its own. refresh: its actions run on every apply, "ok"
    or "changed" (a command with `always`: the clock lock, which nothing reads back).
    warning: what an "ok" check found that works but not as the inventory means it (an
    HCA of nccl_ib_hca the node does not have: NCCL runs on the rails left).
    """

    role: str
    task: str
    module: str
    status: Status
    summary: str = ""
    diff: str = ""
    actions: tuple[Action, ...] = ()
    handler: bool = False
    deferred: bool = False
    refresh: bool = False
    warning: str = ""

    @property
    def changed(self) -> bool:
        return self.status == "changed"

    @property
    def applies(self) -> bool:
        """Whether an apply runs its actions: a change, or a refresh that did not fail."""
        return self.changed or (self.refresh and self.status == "ok")
