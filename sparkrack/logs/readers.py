"""`invoke logs`: every rank's engine log (or the chosen ones), each line prefixed with its
rank and node, merged by time (docs/watchdog.md#logs-and-one-command-on-every-node).

Each rank is read by a thread of its own into a queue of its own; the queues merge by
docker's timestamps (a heap), or with --follow within a short reorder window. Everything
but DockerRankLogs, show_logs and failed_start_lines is pure or runs on fakes in the unit
tests.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.core.since import parse_since
from sparkrack.logs.lines import (
    END,
    REORDER_WINDOW_S,
    Dedup,
    LineSplitter,
    LogLine,
    Notice,
    ReorderBuffer,
    nccl_info,
    prefix,
    split_timestamp,
)

if TYPE_CHECKING:
    from sparkrack.deployments.running import Running

PROBE_EVERY_S = 5.0  # between liveness round trips to the nodes being read
RETRY_S = 1.0  # --follow: between attempts to attach to a rank's container again
QUEUE_LINES = 10000  # lines buffered per rank before its reader waits


# --- Choosing the ranks ------------------------------------------------------------------


def choose_deployment(found: Running) -> str | None:
    """The deployment whose logs to show: the running one, else the one with the most
    containers left (the last one, stopped)."""
    if found.deployment is not None:
        return found.deployment
    pool = [r.deployment for r in found.ranks]
    return max(dict.fromkeys(pool), key=pool.count) if pool else None


def parse_ranks(text: str | None) -> set[int] | None:
    """--rank 0 or --rank 0,3 -> {0, 3}; None for every rank. UsageError otherwise."""
    if text is None or str(text).strip() == "":
        return None
    try:
        return {int(part) for part in str(text).split(",") if part.strip()}
    except ValueError:
        raise UsageError(f"--rank {text!r}: expected rank numbers",
                         fix="e.g. --rank 0 or --rank 0,3") from None


def select_ranks(ranks: Sequence, deployment: str | None, wanted_ranks: set[int] | None,
                 wanted_nodes: set[str] | None) -> list:
    """The deployment's ranks that --rank / --limit chose, by rank."""
    return sorted((r for r in ranks if r.deployment == deployment
                   and (wanted_ranks is None or r.rank in wanted_ranks)
                   and (wanted_nodes is None or r.node in wanted_nodes)),
                  key=lambda r: r.rank)


# --- Reading one rank --------------------------------------------------------------------


class ContainerGone(SparkrackError):
    """The rank has no container on its node (removed, not created yet)."""


@dataclass
class Attached:
    """One attachment to a rank's container log."""

    container_id: str
    status: str
    exit_code: int | None
    chunks: Iterable[bytes]


class RankReader(threading.Thread):
    """Reads one rank's log into its own queue: LogLine, Notice, then END.

    logs.attach(since, tail, follow) gives an Attached or raises ContainerGone (or anything
    else: the node or its docker did not answer); logs.cancel() ends a blocked attachment.
    With follow, attaches again after the stream ends or fails, from the last line on."""

    def __init__(self, logs, rank: int, node: str, *, follow: bool, since: float | None,
                 tail: int | None, retry: float = RETRY_S):
        super().__init__(name=f"logs-rank{rank}", daemon=True)
        self.logs = logs
        self.rank = rank
        self.node = node
        self.follow = follow
        self.since = since
        self.tail = tail
        self.retry = retry
        self.queue: queue.Queue = queue.Queue(QUEUE_LINES)
        self.stopping = threading.Event()
        self.seen = Dedup()
        self.error: str | None = None  # why it ended early (not following)

    def stop(self) -> None:
        self.stopping.set()
        self.cancel()

    def cancel(self) -> None:
        """End the current attachment (its node stopped answering); following, attach
        again later."""
        try:
            self.logs.cancel()
        except Exception:  # best effort: the stream may already be gone
            pass

    def _say(self, text: str) -> None:
        self._put(Notice(f"{prefix(self.rank, self.node)} {text}"))

    def _put(self, item) -> None:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def run(self) -> None:
        try:
            self._read()
        finally:
            self.queue.put(END)  # never lost: END may wait for room like any line

    def _read(self) -> None:
        first, known, problem = True, None, None
        while not self.stopping.is_set():
            try:
                since = self.since if first else self.seen.since()
                attached = self.logs.attach(since=since, tail=self.tail if first else None,
                                            follow=self.follow)
            except Exception as error:  # ContainerGone, or the node/docker not answering
                why = error.line() if isinstance(error, SparkrackError) else _first_line(error)
                if not self.follow:
                    self.error = why
                    self._say(f"cannot read the log: {why}")
                    return
                if why != problem:
                    self._say(f"{why}; waiting for it")
                    problem = why
                self.stopping.wait(self.retry)
                continue
            state = (attached.container_id, attached.status)
            if known is not None and state != known or problem:
                self._say(_attached_words(attached, known))
            known, problem = state, None
            first = False
            self._drain(attached.chunks)
            if not self.follow:
                return
            if attached.status != "running":  # what it printed before it stopped is shown
                self.stopping.wait(self.retry)

    def _drain(self, chunks: Iterable[bytes]) -> None:
        splitter = LineSplitter()
        try:
            for chunk in chunks:
                for text in splitter.feed(chunk):
                    self._line(text)
                if self.stopping.is_set():
                    return
        except Exception as error:  # the stream broke off: following, attach again
            if not self.follow:
                self.error = _first_line(error)
                self._say(f"log broke off: {self.error}")
        for text in splitter.flush():
            self._line(text)

    def _line(self, raw: str) -> None:
        ns, text = split_timestamp(raw)
        if ns is None:  # no timestamp (should not happen): keep it beside the last line
            ns = self.seen.last_ns or 0
        if self.seen.fresh(ns, text) and not nccl_info(text):
            self._put(LogLine(ns, self.rank, self.node, text))


def _attached_words(attached: Attached, known: tuple[str, str] | None) -> str:
    """What changed about the rank's container since the last attachment."""
    short = attached.container_id[:12]
    if known is not None and attached.container_id != known[0]:
        what = f"new container {short} ({attached.status})"
    else:
        what = f"container {short} {attached.status}"
    if attached.status == "running":
        return what + ": following again"
    code = f", exit code {attached.exit_code}" if attached.exit_code is not None else ""
    return what + f"{code}: waiting for it to run again"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


# --- Many ranks --------------------------------------------------------------------------


class Liveness:
    """The nodes' short SSH round trip every PROBE_EVERY_S, in a thread of its own (a dead
    node takes the connect timeout to fail, and the other ranks must keep streaming); says
    when a node stops answering (its readers are cancelled) and when it answers again."""

    def __init__(self, probe: Callable[[Sequence[str]], dict[str, str]],
                 readers: Sequence[RankReader], on_event: Callable[[str], None],
                 every: float = PROBE_EVERY_S):
        self.probe = probe  # {node: error} of the nodes that did not answer
        self.readers = readers
        self.on_event = on_event
        self.every = every
        self.down: dict[str, str] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="logs-liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self.every):
            try:
                self.check()
            except Exception as error:  # a probe that fails to run says nothing new
                self.on_event(f"liveness probe failed: {_first_line(error)}")

    def check(self) -> None:
        """One round of probes of the nodes whose readers still run."""
        nodes = list(dict.fromkeys(r.node for r in self.readers if r.is_alive()))
        failed = self.probe(nodes) if nodes else {}
        for node, why in failed.items():
            if node not in self.down:
                self.down[node] = why
                self.on_event(f"{node} is not answering ({why}); showing the other ranks")
                for reader in self.readers:
                    if reader.node == node:
                        reader.cancel()
        for node in [n for n in self.down if n not in failed and n in nodes]:
            del self.down[node]
            self.on_event(f"{node} answers again")


def merged_lines(readers: Sequence[RankReader], liveness: Liveness,
                 on_event: Callable[[str], None], wait: float = 0.5) -> Iterator[LogLine]:
    """Without --follow: every reader's lines merged by time. A reader whose node stops
    answering is left out (named) and the others go on."""

    def next_line(reader: RankReader) -> LogLine | None:
        while True:
            try:
                item = reader.queue.get(timeout=wait)
            except queue.Empty:
                if reader.node in liveness.down:
                    reader.stop()
                    return None
                continue
            if item is END:
                return None
            if isinstance(item, Notice):
                on_event(item.text)
                continue
            return item

    heap = []
    for index, reader in enumerate(readers):
        line = next_line(reader)
        if line is not None:
            heap.append((line, index))
    heapq.heapify(heap)
    while heap:
        line, index = heapq.heappop(heap)
        yield line
        following = next_line(readers[index])
        if following is not None:
            heapq.heappush(heap, (following, index))


def followed_lines(readers: Sequence[RankReader], on_event: Callable[[str], None], *, window: float = REORDER_WINDOW_S,
                   clock: Callable[[], float] = time.monotonic, tick: float = 0.05,
                   until: Callable[[], bool] = lambda: False) -> Iterator[LogLine]:
    """--follow: lines as they arrive, in time order within the reorder window, until
    until() (or every reader ended). Ctrl-C reaches the caller between ticks."""
    buffer = ReorderBuffer(window)
    ended: set[int] = set()
    while not until() and len(ended) < len(readers):
        got = False
        for index, reader in enumerate(readers):
            while index not in ended:
                try:
                    item = reader.queue.get_nowait()
                except queue.Empty:
                    break
                got = True
                if item is END:
                    ended.add(index)
                elif isinstance(item, Notice):
                    on_event(item.text)
                else:
                    buffer.push(item, clock())
        yield from buffer.ready(clock())
        if not got:
            time.sleep(tick)
    yield from buffer.drain()


# --- The docker side ---------------------------------------------------------------------


class DockerRankLogs:
    """One rank's container log through its node's docker API (the fleet's client).

    The first attachment reads the container chosen when the ranks were listed; later ones
    (following) find the rank's container by its labels again: a restarted or recreated
    container is the same rank."""

    def __init__(self, fleet, node: str, rank: int, container_id: str | None = None):
        self.fleet = fleet
        self.node = node
        self.rank = rank
        self.container_id = container_id
        self._stream = None

    def attach(self, *, since: float | None, tail: int | None, follow: bool) -> Attached:
        from sparkrack.fleet.containers import ContainerNotFound

        node = self.fleet.docker(self.node)
        container = None
        if self.container_id is not None:
            try:
                container = node.container(self.container_id)
            except ContainerNotFound:
                container = None
            self.container_id = None  # from now on: by label
        if container is None:
            container = self._find(node)
        self._stream = node.log_stream(container.id, follow=follow, since=since,
                                       tail="all" if tail is None else int(tail))
        return Attached(container.id, container.status, container.exit_code, self._stream)

    def _find(self, node):
        from sparkrack.engines import LABEL_ENGINE, LABEL_RANK

        found = node.containers(labels=[LABEL_ENGINE, f"{LABEL_RANK}={self.rank}"])
        if not found:
            raise ContainerGone(f"no engine container for rank {self.rank} on {self.node}")
        running = [c for c in found if c.status == "running"]
        return max(running or found, key=lambda c: c.created)

    def cancel(self) -> None:
        """Close the current stream from another thread."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


def show_logs(inventory, *, ranks: str | None = None, nodes: str | None = None,
              follow: bool = False, since: str | None = None, tail: int | None = None,
              emit: Callable[[LogLine], None], on_event: Callable[[str], None]) -> list[str]:
    """Print the deployment's logs; the nodes or ranks that could not be read, named (an
    empty list: every chosen rank was read)."""
    from sparkrack.deployments.running import running
    from sparkrack.fleet import Fleet

    since_s = parse_since(since) if since else None
    wanted_ranks = parse_ranks(ranks)
    wanted_nodes = {n.name for n in inventory.select(nodes)} if nodes else None
    with Fleet(inventory) as fleet:
        listed = running(fleet)
        found, errors = listed.ranks, listed.errors
        deployment = choose_deployment(listed)
        for node, why in errors.items():
            if wanted_nodes is None or node in wanted_nodes:
                on_event(f"{node}: cannot list its containers: {why}")
        if deployment is None:
            raise SparkrackError("no engine container on the rack" + (
                f" that answered ({len(errors)} node(s) did not)" if errors else ""),
                fix="`invoke up` starts one; `invoke logs --failed` shows a failed start's "
                    "last lines; `invoke status` shows the nodes")
        chosen = select_ranks(found, deployment, wanted_ranks, wanted_nodes)
        if not chosen:
            raise UsageError(f"no rank of {deployment} matches --rank/--limit",
                             fix="ranks: " + ", ".join(f"{r.rank} ({r.node})" for r in
                                                      select_ranks(found, deployment, None, None)))
        if not any(r.alive for r in chosen):
            on_event(f"{deployment} is not running: showing what its containers printed")
        readers = [RankReader(DockerRankLogs(fleet, r.node, r.rank, r.name), r.rank, r.node,
                              follow=follow, since=since_s, tail=tail) for r in chosen]

        def probe(names: Sequence[str]) -> dict[str, str]:
            result = fleet.run({name: ["true"] for name in names},
                               timeout=inventory.vars.ssh_connect_timeout)
            return {r.node: r.error or r.status for r in result if not r.ok}

        liveness = Liveness(probe, readers, on_event)
        for reader in readers:
            reader.start()
        liveness.start()
        try:
            lines = (followed_lines(readers, on_event) if follow
                     else merged_lines(readers, liveness, on_event))
            for line in lines:
                emit(line)
        except KeyboardInterrupt:
            if not follow:
                raise
        finally:
            liveness.stop()
            for reader in readers:
                reader.stop()
        problems = [f"{node}: {why}" for node, why in liveness.down.items()]
        problems += [f"{prefix(r.rank, r.node)} {r.error}" for r in readers if r.error]
        return problems + [f"{node}: {why}" for node, why in errors.items()
                           if wanted_nodes is None or node in wanted_nodes]


def failed_start_lines(inventory) -> tuple:
    """(the head's failed record, the lines its failed rank printed last, as LogLines)."""
    from sparkrack.deployments.record import read
    from sparkrack.fleet import Fleet

    with Fleet(inventory, [inventory.head]) as fleet:
        failed = read(fleet, inventory)["failed"]
    kept = failed.log_tail if failed else {}
    if not kept.get("lines"):
        raise SparkrackError(f"no failed start's log lines are recorded on {inventory.head.name}"
                             + (f" ({failed.deployment_id} failed: {failed.error})" if failed
                                else ""), fix="`invoke status` shows the deployment records")
    return failed, [LogLine(ns or 0, int(kept["rank"]), str(kept["node"]), text)
                    for ns, text in map(split_timestamp, kept["lines"])]
