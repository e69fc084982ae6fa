"""How a transfer shows itself (weights.stage, provision's and onboarding's image chain and
weight copy): a bar per node with its bytes, rate and time left on a terminal (rich), a
plain line per node's change of state otherwise; the tables of weights.stage / verify /
list."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from sparkrack.core import console
from sparkrack.transfer.manifest import size_text
from sparkrack.transfer.models import NodeModel, StagedModel
from sparkrack.transfer.weights import StageReport


class TransferProgress:
    """on_progress(label, done, total) of a transfer (weights.stage, an image chain): on a
    terminal a rich bar per label with its bytes, rate and time left; piped, or quiet, one
    line per label's change of state (receiving; received; at the end, stopped short);
    silent: nothing (--json). Bars start at the first bytes (a question asked before them
    is not drawn over) and end with the `with` block."""

    def __init__(self, labels: Sequence[str] = (), *, quiet: bool = False,
                 silent: bool = False):
        self.silent = silent
        self.lines = quiet or not console.err.is_terminal
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._seen: dict[str, tuple[int, int]] = {}
        self._said: dict[str, str] = {}
        self._bars = self._tasks = None
        self._labels = list(labels)

    def __enter__(self) -> TransferProgress:
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._bars is not None:
                self._bars.stop()
            elif self.lines and not self.silent:
                for label, (done, total) in self._seen.items():
                    if self._said.get(label) != "received":
                        console.say(f"{label}: stopped at {size_text(done)} of "
                                    f"{size_text(total)}")

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.silent:
            return
        with self._lock:
            self._seen[label] = (done, total)
            if self.lines:
                self._line(label, done, total)
                return
            if self._bars is None:
                self._bars = self._progress()
                self._tasks = {}
                for name in self._labels:
                    self._tasks[name] = self._bars.add_task(name, total=None, start=False)
                self._bars.start()
            if label not in self._tasks:
                self._tasks[label] = self._bars.add_task(label, total=None, start=False)
            self._bars.start_task(self._tasks[label])
            self._bars.update(self._tasks[label], completed=done, total=total or None)

    def _line(self, label: str, done: int, total: int) -> None:
        """One line when the label's state changes: its first bytes, then all of them."""
        now = time.monotonic()
        state = "received" if total and done >= total else "receiving" if done else None
        if state is None or self._said.get(label) == state:
            return
        if state == "receiving" and self._said.get(label) is None:
            self._started[label] = now
            console.say(f"{label}: receiving ({size_text(total)})" if total else
                        f"{label}: receiving")
        if state == "received":
            seconds = now - self._started.get(label, now)
            rate = f", {size_text(int(done / seconds))}/s" if seconds >= 1 else ""
            console.say(f"{label}: received {size_text(done)} in {seconds:.0f} s{rate}")
        self._said[label] = state

    @staticmethod
    def _progress():
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        return Progress(TextColumn("{task.description}"), BarColumn(),
                        DownloadColumn(binary_units=True), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=console.err, transient=False)


def print_stage(report: StageReport) -> None:
    """One row per target node, then the summary line."""
    console.print_table(
        f"weights.stage {report.model_path} from {report.source}",
        ["node", "state", "files copied", "resumed", "received", "error"],
        [[n.node, n.state, len(n.copied) if not report.check else len(n.needed),
          len(n.resumed) or None, size_text(n.received) if n.received else None, n.error]
         for n in report.nodes.values()])
    console.say(f"weights: {report.summary()}")


def print_verify(model_path: str, digest: str | None, rows: Sequence[NodeModel]) -> None:
    console.print_table(
        f"weights.verify {model_path} (rack manifest {(digest or 'none')[:12]})",
        ["node", "status", "manifest", "files", "size", "partial files", "problems"],
        [[r.node, r.status, (r.digest or "")[:12] or None, r.files, size_text(r.bytes),
          r.partials or None, "; ".join(r.problems[:3]) or None] for r in rows])


def print_list(models: Sequence[StagedModel], used: dict[str, list[str]]) -> None:
    console.print_table(
        "staged models",
        ["model", "manifest", "nodes", "size", "partial on", "used by"],
        [[m.path, ", ".join(d[:12] for d in m.digests) or None,
          "; ".join(f"{len(nodes)}: {', '.join(nodes)}" for nodes in m.digests.values()) or None,
          size_text(m.bytes) if m.bytes else None, ", ".join(m.partial_nodes) or None,
          ", ".join(used.get(m.path, [])) or None] for m in models])

