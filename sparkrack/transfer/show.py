"""How staging shows itself: a bar per node with its rate on a terminal (rich), a plain line
per node every few seconds otherwise; the tables of weights.stage / verify / list."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from sparkrack.core import console
from sparkrack.transfer.manifest import size_text
from sparkrack.transfer.models import NodeModel, StagedModel
from sparkrack.transfer.weights import StageReport


class StageProgress:
    """on_progress for transfer.weights.stage: per node, bytes through it of the stream."""

    def __init__(self, nodes: Sequence[str], *, quiet: bool = False, every: float = 5.0):
        self.quiet, self.every = quiet, every
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._started = time.monotonic()
        self._bars = None
        err = console.err
        if not quiet and err.is_terminal:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._bars = Progress(TextColumn("{task.description}"), BarColumn(),
                                  DownloadColumn(binary_units=True), TransferSpeedColumn(),
                                  TimeRemainingColumn(), console=err, transient=False)
            self._tasks = {name: self._bars.add_task(name, total=None, start=False)
                           for name in nodes}

    def __enter__(self) -> StageProgress:
        if self._bars is not None:
            self._bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bars is not None:
            self._bars.stop()

    def __call__(self, node: str, done: int, total: int) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._bars is not None:
                task = self._tasks.get(node)
                if task is not None:
                    self._bars.start_task(task)
                    self._bars.update(task, completed=done, total=total)
                return
            now = time.monotonic()
            if now - self._last.get(node, 0.0) < self.every and done < total:
                return
            self._last[node] = now
            rate = done / max(now - self._started, 1e-3)
            console.say(f"{node}: {size_text(done)} of {size_text(total)} "
                        f"({size_text(int(rate))}/s)")


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

