"""The fleet's router: a real SMG (`smg launch`, the pinned release) on loopback in front of
stub TP groups on loopback: registration (with the fleet's connect timeout), the router's
drain, its counters, and the series the dashboard's router panels ask for."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_stub_group import GpuSim, LocalGroup, chat_tokens, eventually, free_port

from sparkrack.racks.fleetfile import RouterSpec
from sparkrack.racks.router import Router, RouterError

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("smg") is None, reason="smg not installed")


def spec(port: int, metrics: int) -> RouterSpec:
    return RouterSpec(host="127.0.0.1", port=port, metrics_port=metrics, policy="round_robin",
                      version="1.13.0", ssh_user="root", ssh_port=22, ssh_key=None,
                      known_hosts=None, health_check_interval_s=1)


@pytest.fixture
def router(tmp_path):
    port, metrics = free_port(), free_port()
    log = open(tmp_path / "smg.log", "w")
    proc = subprocess.Popen(["smg", "launch", "--host", "127.0.0.1", "--port", str(port),
                             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
                             "--policy", "round_robin", "--disable-tokenizer-autoload",
                             "--health-check-interval-secs", "1", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    api = Router(spec(port, metrics))
    assert eventually(lambda: _answers(api), 20), (tmp_path / "smg.log").read_text()
    yield api
    proc.terminate()
    proc.wait(10)
    log.close()


def _answers(api: Router) -> bool:
    try:
        return api.workers() == []
    except RouterError:
        return False


@pytest.fixture
def group(tmp_path):
    gpu = GpuSim(tmp_path)
    folder = tmp_path / "group"
    folder.mkdir()
    made = LocalGroup(folder, gpu, nnodes=2, extra=["--enable-metrics"],
                      config={"drain_poll_s": 0.3})
    made.start_all()
    made.wait_healthy()
    yield made
    made.stop()
    gpu.stop()


def test_a_rack_is_registered_served_drained_and_removed_through_the_router(router, group):
    url = group.url("")
    worker_id = router.register(url)
    ready = router.wait_ready(url, 30)
    assert ready.id == worker_id and ready.status == "ready" and ready.healthy
    assert ready.connect_timeout_s == router.spec.connect_timeout_s == 2  # SMG's own: 10
    assert router.register(url) == worker_id  # registered once
    before = router.counts()
    through = LocalGroup.__new__(LocalGroup)
    through.ports = [router.spec.port]
    status, events = LocalGroup.stream(through, "/v1/chat/completions", {
        "model": "stub-model", "messages": [{"role": "user", "content": "a b"}],
        "max_tokens": 12})
    assert status == 200 and len(chat_tokens(events)) == 12 and events[-1][1] == "[DONE]"
    # a stream in flight when the drain begins ends whole; the router sends nothing new
    done: dict = {}
    reader = threading.Thread(target=lambda: done.update(result=LocalGroup.stream(
        through, "/v1/chat/completions", {"model": "stub-model", "max_tokens": 40,
                                          "messages": [{"role": "user", "content": "q"}]})))
    reader.start()
    assert eventually(lambda: "sglang:num_running_reqs{model_name=\"stub-model\"} 1"
                      in group.get("/metrics").decode())
    drained = router.drain(url)
    assert drained is not None and drained.id == worker_id
    assert router.worker(url).status == "draining"
    assert through_status(through) == 503  # no worker to send it to: the rack never sees it
    exported = set(re.findall(r"^(smg_[a-z0-9_]+)\{", router._call(
        "GET", "/metrics", port=router.spec.metrics_port)[1].decode(), re.MULTILINE))
    assert dashboard_router_metrics() <= exported, dashboard_router_metrics() - exported
    reader.join(10)
    assert len(chat_tokens(done["result"][1])) == 40
    assert 'sglang:num_requests_total{model_name="stub-model"} 2' in group.get("/metrics").decode()
    assert eventually(lambda: router.worker(url) is None, 20)  # gone once SMG settled
    requests, failed = router.counts().rate_since(before)
    assert requests >= 3 and failed >= 1  # the refused one counts


def dashboard_router_metrics() -> set[str]:
    """The smg_* series the shipped dashboard's router panels ask for."""
    dashboard = json.loads((REPO / "deploy" / "grafana" / "sparkrack.json").read_text())
    return {name for panel in dashboard["panels"] for target in panel.get("targets", [])
            for name in re.findall(r"\bsmg_[a-z0-9_]+", target["expr"])}


def through_status(through: LocalGroup) -> int:
    import urllib.error

    try:
        LocalGroup.chat(through, 1, max_tokens=1)
    except urllib.error.HTTPError as error:
        return error.code
    return 200


@pytest.fixture
def other_group(tmp_path):
    """A second rack's head: another stub group on loopback."""
    folder = tmp_path / "other"
    folder.mkdir()
    gpu = GpuSim(folder)
    made = LocalGroup(folder, gpu, nnodes=2, extra=["--enable-metrics"])
    made.start_all()
    made.wait_healthy()
    yield made
    made.stop()
    gpu.stop()


def silence(port: int) -> list[socket.socket]:
    """Nothing answers a connection to 127.0.0.1:port any more, not even a reset, as from a
    head that lost power: a listener that never accepts, its accept queue filled, drops every
    SYN (the kernel's listen overflow). The sockets to close to end it."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    held = [listener]
    for _ in range(4):  # a backlog of 0 queues one connection; the SYN after it is dropped
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        held.append(filler)
    return held


def test_a_request_sent_to_a_silent_head_is_served_by_the_other_within_the_connect_timeout(
        router, group, other_group):
    """A head that lost power answers nothing; until the health checks take it out, the
    router still sends it requests. Registered with the fleet's connect timeout (2 s, SMG's
    own 10 s), each is on the other head 2 s later (SMG retries a 504) and ends whole."""
    urls = [group.url(""), other_group.url("")]
    for url in urls:
        router.register(url)
        router.wait_ready(url, 30)
    other_group.stop()
    quiet = silence(other_group.ports[0])
    through = LocalGroup.__new__(LocalGroup)
    through.ports = [router.spec.port]
    took = []
    try:
        for _ in range(4):  # round robin: half of them chose the silent head first
            began = time.monotonic()
            status, events = LocalGroup.stream(through, "/v1/chat/completions", {
                "model": "stub-model", "messages": [{"role": "user", "content": "q"}],
                "max_tokens": 4})
            took.append(round(time.monotonic() - began, 2))
            assert status == 200 and len(chat_tokens(events)) == 4 and \
                events[-1][1] == "[DONE]", events
    finally:
        for held in quiet:
            held.close()
    assert max(took) < router.spec.connect_timeout_s + 3, took  # SMG's own 10 s: >= 10 s
    assert max(took) >= router.spec.connect_timeout_s, took  # one did wait on the silent head


def test_a_router_that_does_not_answer_is_one_line_naming_it():
    api = Router(spec(free_port(), free_port()))
    with pytest.raises(RouterError) as caught:
        api.workers()
    assert caught.value.line().startswith(f"router 127.0.0.1:{api.spec.port}: GET /workers:")
