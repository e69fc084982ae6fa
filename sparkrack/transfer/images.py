"""An engine image onto nodes through the chain, each node checked by image ID after.

The source is a docker-save tar on this machine (`tar:PATH`, fed to the first hop over
SSH) or a node that has the image (`node:NAME`, its `docker save`); every hop pipes the
stream into `docker load` while forwarding it. Which image is right is decided before
(provision/images.py). Targets still missing the ID afterwards (a broken link upstream)
get one more chain from the source; a node that cannot be reached is left out and
reported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.fleet import Fleet
from sparkrack.inventory import Node
from sparkrack.transfer.chain import (
    DEFAULT_PYTHON,
    Hop,
    LocalSource,
    NodeSource,
    Progress,
    relay_error,
    run_chain,
)

CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageTarget:
    """Where the one right image for a ref comes from (resolved for the whole rack)."""

    ref: str
    image_id: str | None
    source: str = ""  # "tar:PATH" | "node:NAME"
    error: str | None = None


def short_id(image_id: str) -> str:
    """An image ID as docker shows it: 12 hex digits, no sha256: prefix."""
    return image_id.removeprefix("sha256:")[:12]


@dataclass
class TransferReport:
    """One image's distribution: per target node an error or None, bytes and time."""

    ref: str
    image_id: str
    source: str
    targets: tuple[str, ...]
    errors: dict[str, str | None] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    bytes_sent: int = 0  # bytes that left the source (once per chain)
    bytes_moved: int = 0  # bytes received over all hops
    seconds: float = 0.0
    chains: int = 0

    @property
    def ok(self) -> tuple[str, ...]:
        return tuple(n for n in self.targets if self.errors.get(n) is None)


def file_chunks(path: Path) -> Iterator[bytes]:
    """A local file in chunks (streamed, never all in memory)."""
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk


def distribute(fleet: Fleet, target: ImageTarget, nodes: Sequence[Node], *,
               python: str = DEFAULT_PYTHON, timeout: float = 3600.0,
               attempts: int = 2, on_progress: Progress | None = None) -> TransferReport:
    """Bring target's image onto nodes (a pipelined chain), verify the ID on each.
    on_progress(label, bytes, size) as it goes, per node (label: `NODE IMAGE`); the size
    is the source's estimate (the tar's, or the image's as its node's docker says), then
    each node's whole count once its `docker load` succeeded."""
    report = TransferReport(target.ref, target.image_id or "", target.source,
                            tuple(n.name for n in nodes))
    started = time.monotonic()
    kind, _, where = target.source.partition(":")
    if kind == "tar":
        source = LocalSource(lambda: file_chunks(Path(where)), where)
    else:
        source = NodeSource(fleet.inventory.node(where), ["save", target.ref])
    size = _size(fleet, source, target.ref) if on_progress else 0
    pending = list(nodes)
    for _ in range(attempts):
        if not pending:
            break
        report.chains += 1
        shown = (None if on_progress is None else
                 lambda node, done: on_progress(progress_label(node, target.ref), done,
                                                max(size, done)))
        run = run_chain(fleet, source, [Hop(n, ["load"]) for n in pending], python=python,
                        timeout=timeout, on_progress=shown)
        if run.source is not None:
            report.bytes_sent += int(run.source_report.get("bytes", 0))
            if run.source.status == "unreachable":
                for node in pending:
                    report.errors[node.name] = f"source {target.source} unreachable"
                break
        else:
            report.bytes_sent += int(run.source_report.get("bytes", 0))
        for node in pending:
            result = run.results.get(node.name)
            data = run.reports.get(node.name, {})
            report.bytes_moved += int(data.get("bytes", 0))
            if result is not None and result.status == "unreachable":
                report.unreachable.add(node.name)
            report.errors[node.name] = relay_error(result, data)
        present = verify(fleet, target, [n for n in pending if n.name not in report.unreachable])
        for node in pending:
            if node.name in present:
                report.errors[node.name] = (None if present[node.name] == target.image_id else
                                            report.errors[node.name] or
                                            f"has {short_id(present[node.name] or 'none')} "
                                            f"after the transfer")
            received = int(run.reports.get(node.name, {}).get("bytes", 0))
            if on_progress is not None and report.errors.get(node.name) is None:
                on_progress(progress_label(node.name, target.ref), received, received)
        pending = [n for n in pending if report.errors.get(n.name) is not None
                   and n.name not in report.unreachable]
    report.seconds = time.monotonic() - started
    return report


def progress_label(node: str, ref: str) -> str:
    """How a node's copy of an image is named as it goes: `spark-03 sglang:v0.5.22-cu130`."""
    return f"{node} {ref.rpartition('/')[2]}"


def _size(fleet: Fleet, source: LocalSource | NodeSource, ref: str) -> int:
    """The stream's size, estimated: the tar's, or the image's on its node (docker save
    writes about that much); 0 when it cannot be told."""
    if isinstance(source, LocalSource):
        try:
            return Path(source.label).stat().st_size
        except OSError:
            return 0
    result = fleet.run({source.node.name: ["docker", "image", "inspect", "--format",
                                           "{{.Size}}", ref]}, timeout=30)[source.node.name]
    try:
        return int(result.stdout.strip()) if result.ok else 0
    except ValueError:
        return 0


def verify(fleet: Fleet, target: ImageTarget, nodes: Sequence[Node]) -> dict[str, str | None]:
    """{node: the image ID it has for target.ref, or None} over one round trip."""
    if not nodes:
        return {}
    argv = ["docker", "image", "inspect", "--format", "{{.Id}}", target.ref]
    results = fleet.run({n.name: argv for n in nodes}, timeout=60)
    return {r.node: (r.stdout.strip() or None) if r.ok else None for r in results
            if r.status != "unreachable"}
