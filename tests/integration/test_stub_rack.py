"""Stub engines on the rehearsal rack: the real launch specs as TP8 groups of containers.

The images are built here and `docker load`ed on every node (same ID everywhere); each
rank is `containers.create(**docker_sdk_kwargs(spec))`, fitted to what a rehearsal node
can give (sparkrack/lifecycle/dockerfit.py), started workers first and head last. Every container is
removed in a finally. HTTP goes from this machine to the head at 10.77.1.11.
"""

from __future__ import annotations

import http.client
import io
import json
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import docker.errors
import pytest

from sparkrack.engines import LABEL_ENGINE, build_specs, docker_sdk_kwargs
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import dockerfit
from sparkrack.rehearsal.stub.modeldir import write_stub_model
from sparkrack.rehearsal.stubimage import build_stub_images, load_stub_image

pytestmark = pytest.mark.rack
BUDGET = "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"
KIB = 1024


@pytest.fixture(scope="module")
def stub(inventory):
    """A fleet with both stub images on every node, and the nodes' docker limits."""
    with Fleet(inventory) as fleet:
        busy = {node.name: [c.name for c in fleet.docker_client(node.name).containers.list(
            all=True, filters={"label": LABEL_ENGINE})] for node in fleet.nodes}
        busy = {node: names for node, names in busy.items() if names}
        if busy:
            pytest.skip(f"engine containers already on the rack: {busy}")
        images = build_stub_images(inventory)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda job: load_stub_image(fleet, job[0], *job[1]),
                          [(node.name, images[engine]) for node in fleet.nodes
                           for engine in images]))
        for node in fleet.nodes:  # the same image ID on every node
            client = fleet.docker_client(node.name)
            for engine, (_, image_id) in images.items():
                assert client.images.get(inventory.vars.images[engine]).id == image_id
        yield fleet, dockerfit.probe(fleet)


class Group:
    """One stub deployment's eight containers."""

    def __init__(self, fleet, limits, engine: str, profile: str = "512k",
                 env: dict | None = None, rank_env: dict[int, dict] | None = None):
        self.fleet = fleet
        self.specs = build_specs(fleet.inventory, engine, profile)
        self.containers = {}
        self.head_started = 0.0
        self.port = self.specs[0].ports["http"]
        self.head = fleet.inventory.head.address
        self._limits = limits
        self._env = env or {}
        self._rank_env = rank_env or {}

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def client(self, spec):
        return self.fleet.docker_client(spec.node)

    def start(self) -> None:
        """Create all eight, start ranks 7..1 at once, then rank 0."""
        def create(spec):
            kwargs = docker_sdk_kwargs(spec)
            kwargs["environment"] = {key: value for key, value in
                                     {**kwargs["environment"], **self._env,
                                      **self._rank_env.get(spec.rank, {})}.items()
                                     if value is not None}
            kwargs, _ = dockerfit.fit_kwargs(kwargs, self._limits[spec.node])
            try:
                self.client(spec).containers.get(spec.container_name).remove(force=True)
            except docker.errors.NotFound:
                pass
            self.containers[spec.rank] = self.client(spec).containers.create(**kwargs)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, self.specs))
            list(pool.map(lambda spec: self.containers[spec.rank].start(), self.specs[1:]))
        self.head_started = time.monotonic()
        self.containers[0].start()

    def remove(self) -> None:
        def remove(rank):
            try:
                self.containers[rank].remove(force=True)
            except docker.errors.NotFound:
                pass
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(remove, list(self.containers)))

    def statuses(self) -> dict[int, tuple[str, int]]:
        def state(rank):
            container = self.containers[rank]
            container.reload()
            return rank, (container.status, container.attrs["State"]["ExitCode"])
        with ThreadPoolExecutor(8) as pool:
            return dict(pool.map(state, list(self.containers)))

    def wait_exited(self, timeout: float, ranks=None) -> tuple[float, dict]:
        """(seconds until every rank in ranks exited, {rank: exit code})."""
        began = time.monotonic()
        while True:
            states = self.statuses()
            wanted = {r: s for r, s in states.items() if ranks is None or r in ranks}
            if all(status == "exited" for status, _ in wanted.values()):
                return time.monotonic() - began, {r: code for r, (_, code) in wanted.items()}
            if time.monotonic() - began > timeout:
                raise AssertionError(f"not all exited after {timeout} s: {states}")
            time.sleep(0.1)

    def http(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        connection = http.client.HTTPConnection(self.head, self.port, timeout=timeout)
        connection.request(method, path, None if body is None else json.dumps(body),
                           {"Content-Type": "application/json"})
        return connection, connection.getresponse()

    def health(self) -> int | None:
        try:
            connection, answer = self.http("GET", "/health", timeout=3)
            answer.read()
            connection.close()
            return answer.status
        except OSError:
            return None

    def wait_healthy(self, timeout: float = 30) -> float:
        """Seconds from the head's start until /health answered 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health() == 200:
                return time.monotonic() - self.head_started
            time.sleep(0.05)
        raise AssertionError(f"head not healthy after {timeout} s; rank 0 log:\n"
                             + self.containers[0].logs().decode()[-2000:])

    def chat(self, words: int, max_tokens: int) -> dict:
        connection, answer = self.http("POST", "/v1/chat/completions", {
            "model": "GLM-5.3", "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": " ".join(["word"] * words)}]})
        data = json.loads(answer.read())
        connection.close()
        assert answer.status == 200, data
        return data

    def stream(self, max_tokens: int) -> list[tuple[float, str]]:
        """[(arrival, content)] of one streamed chat completion."""
        connection, answer = self.http("POST", "/v1/chat/completions", {
            "model": "GLM-5.3", "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": "hello rack"}]})
        assert answer.status == 200
        tokens = []
        while True:
            line = answer.readline()
            if not line:
                break
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    if choice.get("delta", {}).get("content"):
                        tokens.append((time.monotonic(), choice["delta"]["content"]))
        connection.close()
        return tokens

    def record(self, rank: int) -> dict:
        """The stub's /tmp/sparkrack-stub-rank<R>.json of one container."""
        chunks, _ = self.containers[rank].get_archive(f"/tmp/sparkrack-stub-rank{rank}.json")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            return json.loads(tar.extractfile(tar.getmembers()[0]).read())


def mem_available(fleet, node: str) -> int:
    """MemAvailable of node in bytes (its simulated unified pool)."""
    out = fleet.run({node: ["cat", "/proc/meminfo"]})[node]
    assert out.status == "ok", out.error
    for line in out.stdout.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no MemAvailable")


def test_sglang_tp8_serves_streams_and_drains(stub):
    fleet, limits = stub
    write_stub_model(fleet, {"load_delay_s": 2, "tokens_per_s": 20})
    idle = mem_available(fleet, "spark-02")
    with Group(fleet, limits, "sglang") as group:
        group.start()
        up = group.wait_healthy()
        print(f"\nsglang TP8 up in {up:.2f} s from the head's start (load delay 2 s)")
        assert 2.0 <= up < 8.0
        loaded = mem_available(fleet, "spark-02")
        assert idle - loaded > 0.79 * 127600748 * KIB  # --mem-fraction-static 0.80
        for spec in (group.specs[0], group.specs[5]):  # argv and env exactly as planned
            record = group.record(spec.rank)
            assert record["argv"] == list(spec.argv)
            assert {k: record["env"][k] for k in spec.env} == dict(spec.env)

        tokens = group.stream(30)
        rate = (len(tokens) - 1) / (tokens[-1][0] - tokens[0][0])
        print(f"streamed {len(tokens)} tokens at {rate:.1f} tok/s (configured 20)")
        assert len(tokens) == 30 and 16 < rate < 24

        for words in (2000, 8000):  # the indexer budget is set: no ratchet
            assert group.chat(words, 1)["usage"]["prompt_tokens"] == words
            assert mem_available(fleet, "spark-02") == loaded

        streamed = {}
        reader = threading.Thread(target=lambda: streamed.update(tokens=group.stream(30)))
        reader.start()
        time.sleep(0.5)
        util = fleet.run(["nvidia-smi", "--query-gpu=utilization.gpu,clocks.sm",
                          "--format=csv,noheader,nounits"])
        assert {r.stdout.split(",")[0].strip() for r in util} == {"100"}  # every GPU busy
        group.containers[3].kill(signal="SIGTERM")  # a worker only logs it
        group.containers[0].kill(signal="SIGTERM")  # rank 0 drains
        time.sleep(0.2)
        assert group.health() == 503
        reader.join(20)
        assert len(streamed["tokens"]) == 30  # the in-flight request finished
        took, codes = group.wait_exited(10)
        print(f"drained and exited {took:.2f} s after the stream")
        assert codes == {rank: 0 for rank in range(8)}
        assert "waits for rank 0" in group.containers[3].logs().decode()
        assert mem_available(fleet, "spark-02") == idle  # exiting gave it back


def test_sglang_without_budget_ratchets_and_a_dead_worker_kills_the_group(stub):
    fleet, limits = stub
    write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50,
                             "prefill_tokens_per_s": 50000})
    with Group(fleet, limits, "sglang", env={BUDGET: None}) as group:
        group.start()
        group.wait_healthy()
        loaded = mem_available(fleet, "spark-04")
        held = []
        for words in (2000, 4000, 8000, 4000):
            group.chat(words, 1)
            held.append((loaded - mem_available(fleet, "spark-04")) // (1 << 20))
        print(f"\nscratch held on spark-04 after 2K/4K/8K/4K prompts: {held} MiB")
        assert held[0] < held[1] < held[2] == held[3]  # ratchets with the longest prompt
        assert held == [15, 61, 183, 183]

        killed = time.monotonic()
        group.containers[3].kill()  # SIGKILL one worker
        _, codes = group.wait_exited(10)
        print(f"group gone {time.monotonic() - killed:.2f} s after rank 3 was killed")
        assert time.monotonic() - killed < 5
        assert codes[3] == 137 and all(codes[r] == 1 for r in codes if r != 3)
        for rank in (0, 6):
            assert "NCCL error" in group.containers[rank].logs().decode()


def test_vllm_tp8_headless_workers_and_smoke_request(stub):
    fleet, limits = stub
    write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50})
    with Group(fleet, limits, "vllm") as group:
        group.start()
        up = group.wait_healthy()
        print(f"\nvllm TP8 up in {up:.2f} s (load delay 1 s)")
        answer = group.chat(10, 8)
        assert answer["usage"] == {"prompt_tokens": 10, "completion_tokens": 8,
                                   "total_tokens": 18}
        assert group.record(7)["argv"] == list(group.specs[7].argv)
        assert "--headless" in group.specs[7].argv
        group.containers[0].stop(timeout=30)
        _, codes = group.wait_exited(10)
        assert codes == {rank: 0 for rank in range(8)}
