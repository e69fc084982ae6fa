"""The pipelined chain: source -> hop 1 -> hop 2 -> ... -> hop n, every byte sent once.

Every hop runs sparkrack/remote/relay.py: it listens on its fabric address (roce_addr) on
a port picked for this transfer, takes only the connection that presents this transfer's
token (on stdin, never argv), keeps the stream (its sink) while forwarding it to the next
hop. The source is a relay on a node (`docker save`, model files) that connects to the
first hop, or this machine, which feeds the first hop over its SSH session. So the time
approaches one single-link send rather than n of them, and the source's uplink carries the
data once. Every relay runs as its own fleet command: a node that stops answering is
reported unreachable within the fleet's liveness window, and the hops around it give up
after the inventory's transfer_stall_timeout without progress instead of waiting for their
timeout.
"""

from __future__ import annotations

import json
import secrets as token_source
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sparkrack import remote
from sparkrack.fleet import Fleet, NodeResult
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Node

DEFAULT_PYTHON = "/usr/bin/python3"
PORT_RANGE = (42100, 42900)
# where each hop's relay notes its progress: a file of its own, named for this transfer at
# random, made new and private (relay.Progress), removed when the relay ends
PROGRESS_DIR = "/tmp"
# what a transfer shows as it goes: (label, bytes through it, bytes in all; the estimate of
# an image's size until its last call)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Hop:
    """A node of the chain and what it keeps: ["load"], ["files", ROOT, CACHE, WANTED] or
    ["none"] (remote/relay.py)."""

    node: Node
    sink: list


@dataclass(frozen=True)
class NodeSource:
    """The stream comes from a relay on node: ["save", REF] or ["files", ROOT, PLAN, BPS]."""

    node: Node
    spec: list


@dataclass(frozen=True)
class LocalSource:
    """The stream comes from this machine: chunks() makes it (once per chain)."""

    chunks: Callable[[], Iterable[bytes]]
    label: str


@dataclass
class ChainRun:
    """What one chain did: per hop its fleet result and its relay's report, and the
    source's (None for a local source)."""

    results: dict[str, NodeResult] = field(default_factory=dict)
    reports: dict[str, dict] = field(default_factory=dict)
    source: NodeResult | None = None
    source_report: dict = field(default_factory=dict)


def relay_argv(python: str) -> list:
    """The argv of one relay (its settings go in on stdin)."""
    return remote.argv(python, "relay")


def run_chain(fleet: Fleet, source: NodeSource | LocalSource, hops: Sequence[Hop], *,
              python: str = DEFAULT_PYTHON, timeout: float = 3600.0,
              on_progress: Callable[[str, int], None] | None = None) -> ChainRun:
    """Move one stream through hops (in order); returns when every relay ended.
    on_progress(node, bytes): about every second while it runs, the bytes each hop has
    received (read from the relay's progress file), then each hop's last count."""
    port = PORT_RANGE[0] + token_source.randbelow(PORT_RANGE[1] - PORT_RANGE[0])
    token = token_source.token_hex(16)
    transfer = token_source.token_hex(8)
    progress = {h.node.name: f"{PROGRESS_DIR}/.sparkrack-chain-{transfer}-{h.node.name}"
                for h in hops}  # one file a node (nodes sharing a /tmp, as on loopback)
    run = ChainRun()
    stall = min(h.node.vars.transfer_stall_timeout for h in hops)

    def settings(origin: list, sink: list, index: int) -> bytes:
        after = [hops[index + 1].node.roce_addr, port] if index + 1 < len(hops) else None
        return (token + "\n" + json.dumps({
            "from": origin, "sink": sink, "next": after, "stall": stall,
            "progress": progress[hops[index].node.name] if on_progress else None}) + "\n"
                ).encode()

    def hop(index: int) -> NodeResult:
        node, sink = hops[index].node, hops[index].sink
        if index == 0 and isinstance(source, LocalSource):
            head = settings(["stdin"], sink, 0)
            return fleet.stream(node.name, relay_argv(python),
                                _prefixed(head, source.chunks, run.source_report),
                                timeout=timeout)
        stdin = settings(["recv", node.roce_addr, port], sink, index)
        return fleet.run({node.name: relay_argv(python)}, stdin=stdin, timeout=timeout)[node.name]

    def sender() -> NodeResult:
        stdin = (token + "\n" + json.dumps({"from": source.spec, "sink": ["none"], "next": [
            hops[0].node.roce_addr, port], "stall": stall}) + "\n").encode()
        return fleet.run({source.node.name: relay_argv(python)}, stdin=stdin,
                         timeout=timeout)[source.node.name]

    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=len(hops) + 2, thread_name_prefix="chain") as pool:
        hop_futures = {h.node.name: pool.submit(hop, i) for i, h in enumerate(hops)}
        sent = pool.submit(sender) if isinstance(source, NodeSource) else None
        if on_progress is not None:
            pool.submit(_watch, fleet, [h.node for h in hops], progress, stop, on_progress)
        try:
            for name, future in hop_futures.items():
                run.results[name] = future.result()
                run.reports[name] = last_json_object(run.results[name].stdout)
            if sent is not None:
                run.source = sent.result()
                run.source_report = last_json_object(run.source.stdout)
        finally:
            stop.set()
    if on_progress is not None:
        for name, report in run.reports.items():
            on_progress(name, int(report.get("bytes", 0)))
    return run


def _watch(fleet: Fleet, nodes: Sequence[Node], paths: dict[str, str], stop: threading.Event,
           on_progress: Callable[[str, int], None]) -> None:
    """About every second until stop, each node's bytes as its relay notes them in its
    file (one `cat` per node, over the fleet's connections)."""
    while not stop.wait(1.0):
        results = fleet.run({n.name: ["cat", paths[n.name]] for n in nodes}, timeout=5)
        for result in results:
            if result.ok and not stop.is_set():
                try:
                    on_progress(result.node, int(json.loads(result.stdout or "{}")["bytes"]))
                except (ValueError, KeyError, TypeError):
                    continue


def _prefixed(head: bytes, chunks: Callable[[], Iterable[bytes]],
              report: dict) -> Iterable[bytes]:
    """The relay's token and settings, then the stream; a local read error ends the stream
    early (the hops see a short stream) and is kept in report["read_error"]."""
    yield head
    sent = 0
    try:
        for chunk in chunks():
            sent += len(chunk)
            yield chunk
    except (OSError, ValueError) as error:
        report["read_error"] = str(error) or type(error).__name__
    report["bytes"] = sent


def relay_error(result: NodeResult | None, report: dict) -> str | None:
    """Why a relay did not do its part (None: it did)."""
    if result is None:
        return "not run"
    if result.status == "ok":
        return None
    if result.status == "unreachable":
        return result.error or "unreachable"
    sink = report.get("sink") or {}
    outcome = sink.get("result") or {}
    details = [report.get("read_error"), sink.get("error"), outcome.get("error"),
               outcome.get("output") if outcome.get("rc") else None,
               (report.get("save") or {}).get("error"), (report.get("forward") or {}).get("error")]
    text = "; ".join(str(d) for d in details if d)
    tail = (result.stderr.strip().splitlines() or [""])[-1]
    return f"relay failed: {text or tail or result.error}"
