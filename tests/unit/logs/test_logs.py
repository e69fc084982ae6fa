"""`invoke logs`: times, line assembly, merging, the reorder window, rank selection, and the
per-rank readers (re-attaching after a restart, naming a node that stops answering) on
fake log sources; DockerRankLogs against a fake docker client."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.deployments.ranks import Rank
from sparkrack.deployments.running import Running
from sparkrack.fleet.containers import NodeDocker
from sparkrack.logs.lines import (
    END,
    Dedup,
    LineSplitter,
    LogLine,
    Notice,
    ReorderBuffer,
    format_line,
    format_timestamp,
    merge,
    parse_timestamp,
    split_timestamp,
)
from sparkrack.logs.readers import (
    Attached,
    ContainerGone,
    DockerRankLogs,
    Liveness,
    RankReader,
    choose_deployment,
    followed_lines,
    merged_lines,
    parse_ranks,
    select_ranks,
)

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
T0 = "2026-01-01T00:00:00"


def stamp(seconds: float, text: str) -> bytes:
    whole = int(seconds)
    fraction = round((seconds - whole) * 1e9)
    return f"{format_timestamp((int(NOW) + whole) * 10**9 + fraction)} {text}\n".encode()


# --- Times -------------------------------------------------------------------------------


def test_docker_timestamps_keep_nanoseconds():
    ns = parse_timestamp(f"{T0}.123456789Z")
    assert ns == int(NOW) * 10**9 + 123456789
    assert format_timestamp(ns) == f"{T0}.123456789Z"
    assert parse_timestamp(f"{T0}Z") == int(NOW) * 10**9
    assert parse_timestamp("2026-01-01T01:00:00.5+01:00") == int(NOW) * 10**9 + 500_000_000
    assert parse_timestamp("not-a-time") is None
    assert split_timestamp(f"{T0}.000000001Z hello world") == (int(NOW) * 10**9 + 1,
                                                                "hello world")
    assert split_timestamp("no stamp here") == (None, "no stamp here")


# --- Lines -------------------------------------------------------------------------------


def test_lines_are_assembled_across_chunks():
    splitter = LineSplitter()
    assert splitter.feed(b"one\ntw") == ["one"]
    assert splitter.feed(b"o\r\nthree\n\nfo") == ["two", "three", ""]
    assert splitter.feed("ür".encode()[:1]) == []  # half of a UTF-8 character
    assert splitter.feed("ür".encode()[1:] + b"\n") == ["foür"]
    assert splitter.feed(b"five") == [] and splitter.flush() == ["five"]
    assert splitter.flush() == []


def test_dedup_drops_what_a_reattachment_repeats():
    seen = Dedup()
    assert seen.since() is None
    assert [seen.fresh(ns, t) for ns, t in [(5, "a"), (5, "b"), (7, "c")]] == [True] * 3
    assert seen.since() == 7e-9
    assert [seen.fresh(ns, t) for ns, t in [(5, "b"), (7, "c"), (7, "d"), (8, "e")]] == [
        False, False, True, True]


def test_merge_orders_by_time_then_rank():
    a = [LogLine(1, 0, "spark-01", "a1"), LogLine(5, 0, "spark-01", "a5")]
    b = [LogLine(1, 1, "spark-02", "b1"), LogLine(3, 1, "spark-02", "b3")]
    assert [line.text for line in merge([b, a])] == ["a1", "b1", "b3", "a5"]


def test_format_line_prefixes_rank_and_node():
    line = LogLine(int(NOW) * 10**9 + 42, 3, "spark-04", "loaded weights")
    assert format_line(line) == "[rank 3 spark-04] loaded weights"
    assert format_line(line, timestamps=True) == (
        f"[rank 3 spark-04] {T0}.000000042Z loaded weights")
    assert format_line(line, color="33") == "\x1b[33m[rank 3 spark-04]\x1b[0m loaded weights"


def test_reorder_window_releases_in_time_order():
    buffer = ReorderBuffer(window=0.5)
    late_early = LogLine(10, 1, "spark-02", "written first, arrived second")
    buffer.push(LogLine(20, 0, "spark-01", "written second"), now=100.0)
    buffer.push(late_early, now=100.3)
    assert buffer.ready(100.4) == []
    # "written second" has waited the window: it goes, after the line written before it
    assert [line.text for line in buffer.ready(100.5)] == ["written first, arrived second",
                                                           "written second"]
    buffer.push(LogLine(40, 0, "spark-01", "y"), now=100.6)
    buffer.push(LogLine(35, 1, "spark-02", "z"), now=100.9)
    assert [line.text for line in buffer.ready(101.1)] == ["z", "y"]
    buffer.push(LogLine(30, 0, "spark-01", "x"), now=101)
    assert [line.text for line in buffer.drain()] == ["x"]


# --- Choosing ----------------------------------------------------------------------------


def rank(node, number, deployment, status="running") -> Rank:
    return Rank(node, number, f"sparkrack-sglang-rank{number}", "sglang", "512k", deployment,
                status, None if status == "running" else 1, 120)


def test_the_running_deployment_is_chosen_else_the_last_one_left():
    old = [rank("spark-01", 0, "old", "exited"), rank("spark-02", 1, "old", "exited")]
    new = [rank("spark-01", 0, "new"), rank("spark-02", 1, "new", "exited")]
    assert choose_deployment(Running(old + new)) == "new"
    assert choose_deployment(Running(old + [rank("spark-03", 2, "other", "exited")])) == "old"
    assert choose_deployment(Running()) is None
    assert [r.rank for r in select_ranks(old + new, "new", {1}, None)] == [1]
    assert [r.node for r in select_ranks(old + new, "new", None, {"spark-01"})] == ["spark-01"]
    assert parse_ranks("0, 3") == {0, 3} and parse_ranks(None) is None
    with pytest.raises(UsageError):
        parse_ranks("head")


# --- Readers on fake sources -------------------------------------------------------------


@dataclass
class FakeLogs:
    """Attachments to hand out in order: an Attached, or an exception to raise."""

    script: list
    calls: list = field(default_factory=list)
    cancelled: int = 0

    def attach(self, *, since, tail, follow):
        self.calls.append((since, tail, follow))
        if not self.script:
            time.sleep(0.05)
            raise ContainerGone("no engine container for rank 1 on spark-02")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def cancel(self):
        self.cancelled += 1


def collect(reader: RankReader, count: int | None = None, seconds=10.0) -> list:
    """The reader's items until END (or until count of them)."""
    items, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline and (count is None or len(items) < count):
        try:
            item = reader.queue.get(timeout=0.1)
        except queue.Empty:
            continue
        if item is END:
            break
        items.append(item)
    return items


def test_reader_without_follow_reads_once_and_reports_a_failure():
    logs = FakeLogs([Attached("c1", "exited", 1, [stamp(0, "a"), b"\n".join(
        [stamp(1, "b").rstrip(b"\n"), stamp(2, "c")])])])
    reader = RankReader(logs, 1, "spark-02", follow=False, since=NOW - 60, tail=100)
    reader.start()
    assert [(i.rank, i.node, i.text) for i in collect(reader)] == [
        (1, "spark-02", "a"), (1, "spark-02", "b"), (1, "spark-02", "c")]
    assert logs.calls == [(NOW - 60, 100, False)]
    failing = RankReader(FakeLogs([OSError("Socket is closed")]), 2, "spark-03", follow=False,
                         since=None, tail=None)
    failing.start()
    assert [i.text for i in collect(failing)] == [
        "[rank 2 spark-03] cannot read the log: Socket is closed"]
    assert failing.error == "Socket is closed"


def test_follow_survives_a_restart_and_a_node_that_stops_answering():
    logs = FakeLogs([
        Attached("c1", "running", None, [stamp(0, "start"), stamp(1, "serving")]),
        Attached("c1", "exited", 137, []),  # the rank was killed
        OSError("no answer within 5 s"),  # then its node stopped answering for a while
        Attached("c2", "running", None, [stamp(1, "serving"), stamp(9, "start again")]),
    ])
    reader = RankReader(logs, 1, "spark-02", follow=True, since=None, tail=10, retry=0.01)
    reader.start()
    items = collect(reader, count=7)
    reader.stop()
    texts = [i.text for i in items]
    assert texts == [
        "start", "serving",
        "[rank 1 spark-02] container c1 exited, exit code 137: waiting for it to run again",
        "[rank 1 spark-02] no answer within 5 s; waiting for it",
        "[rank 1 spark-02] new container c2 (running): following again",
        "start again",  # "serving" at 1 s was shown already
        "[rank 1 spark-02] no engine container for rank 1 on spark-02; waiting for it"]
    assert [isinstance(i, Notice) for i in items] == [False, False, True, True, True, False, True]
    since_first_line = (int(NOW) + 1) * 1.0
    assert logs.calls[0] == (None, 10, True)
    assert logs.calls[1] == (since_first_line, None, True)  # tail only on the first one


class QueueReader:
    """Stands in for a RankReader: a queue already filled, and a liveness flag."""

    def __init__(self, node, items, alive=True):
        self.node = node
        self.queue = queue.Queue()
        for item in items:
            self.queue.put(item)
        self.alive = alive
        self.stopped = False

    def is_alive(self):
        return self.alive

    def stop(self):
        self.stopped = True

    def cancel(self):
        pass


def test_merged_lines_skip_a_node_that_stops_answering():
    one = QueueReader("spark-01", [LogLine(1, 0, "spark-01", "a"), LogLine(4, 0, "spark-01", "d"),
                                   END])
    two = QueueReader("spark-02", [Notice("[rank 1 spark-02] hello"),
                                   LogLine(2, 1, "spark-02", "b"), LogLine(3, 1, "spark-02", "c"),
                                   END])
    three = QueueReader("spark-03", [LogLine(1, 2, "spark-03", "x")])  # then silence: node dead
    events = []
    liveness = Liveness(lambda nodes: {"spark-03": "no answer within 5 s"},
                        [one, two, three], events.append)
    liveness.check()
    lines = list(merged_lines([one, two, three], liveness, events.append, wait=0.01))
    assert [line.text for line in lines] == ["a", "x", "b", "c", "d"]
    assert three.stopped
    assert events == ["spark-03 is not answering (no answer within 5 s); showing the other ranks",
                      "[rank 1 spark-02] hello"]


def test_liveness_says_when_a_node_answers_again():
    events, answers = [], [{"spark-02": "connection refused"}, {}]
    reader = QueueReader("spark-02", [])
    liveness = Liveness(lambda nodes: answers.pop(0), [reader], events.append)
    liveness.check()
    liveness.check()
    assert events == ["spark-02 is not answering (connection refused); showing the other ranks",
                      "spark-02 answers again"]


def test_followed_lines_show_arrivals_in_time_order_until_stopped():
    one = QueueReader("spark-01", [LogLine(5, 0, "spark-01", "later")])
    two = QueueReader("spark-02", [LogLine(3, 1, "spark-02", "earlier")])
    stop = threading.Event()
    clock = iter([0.0, 0.0, 0.1, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0] + [9.0] * 100)
    out = []
    for line in followed_lines([one, two], print, window=0.5, clock=lambda: next(clock),
                               tick=0, until=stop.is_set):
        out.append(line.text)
        if len(out) == 2:
            stop.set()
    assert out == ["earlier", "later"]


# --- The docker side, against a fake client ----------------------------------------------


class FakeStream:
    def __init__(self, chunks):
        self.chunks = chunks
        self.closed = False
        channel = type("Channel", (), {"close": lambda s: setattr(self, "closed", True)})()
        fp = type("Fp", (), {"channel": channel})()
        self._response = type("R", (), {"raw": type("Raw", (), {"_fp": type(
            "F", (), {"fp": fp})()})()})()

    def __iter__(self):
        return iter(self.chunks)

    def close(self):  # docker-py refuses over SSH
        raise RuntimeError("Cancellable streams not supported for the SSH protocol")


class FakeContainer:
    def __init__(self, cid, status, created, code=0):
        self.id, self.name, self.status, self.labels = cid, f"rank-{cid}", status, {}
        self.attrs = {"Created": created, "State": {"ExitCode": code}}
        self.log_calls, self.streams = [], []

    def logs(self, **options):
        self.log_calls.append(options)
        self.streams.append(FakeStream([stamp(0, self.id)]))
        return self.streams[-1]


class FakeContainers:
    def __init__(self, found):
        self.found = found
        self.filters = []

    def get(self, name):
        import docker.errors

        for container in self.found:
            if name == container.id:
                return container
        raise docker.errors.NotFound("gone")

    def list(self, all, filters):
        self.filters.append(filters)
        return self.found


def test_docker_rank_logs_finds_the_rank_by_label_and_closes_the_ssh_channel():
    old = FakeContainer("old", "exited", "2026-01-01T00:00:00Z", 137)
    new = FakeContainer("new", "running", "2026-01-01T00:05:00Z")
    containers = FakeContainers([old, new])
    client = type("Client", (), {"containers": containers})()
    fleet = type("Fleet", (), {"docker": lambda self, node: NodeDocker(client, node)})()
    logs = DockerRankLogs(fleet, "spark-02", 1, "sparkrack-sglang-rank1")
    attached = logs.attach(since=NOW - 600, tail=50, follow=True)
    assert (attached.container_id, attached.status, attached.exit_code) == ("new", "running", None)
    assert containers.filters == [{"label": ["sparkrack.engine", "sparkrack.rank=1"]}]
    assert new.log_calls == [{"stream": True, "follow": True, "timestamps": True, "tail": 50,
                              "since": NOW - 600}]
    logs.cancel()
    assert new.streams[-1].closed  # the SSH channel under the stream
    containers.found = [old]
    attached = logs.attach(since=None, tail=None, follow=False)
    assert (attached.container_id, attached.exit_code) == ("old", 137)
    assert old.log_calls == [{"stream": True, "follow": False, "timestamps": True, "tail": "all"}]
    containers.found = []
    with pytest.raises(ContainerGone):
        logs.attach(since=None, tail=None, follow=True)
