"""Helpers of the rack tests: `quick_burn` (the cap gate's check, QUICK_BURN_S long: every
rack test's gates run it, set by tests/integration/conftest.py), `nothing_runs`
(every engine container on the rack), `Lines` (a command's output as it comes, to act on
an event it reports rather than after a sleep), and `Group`: one stub deployment's eight containers,
created from the real launch specs (with per-rank env overrides), started workers first
and head last, removed after. The `stub` fixture (tests/integration/conftest.py) gives
the fleet and the nodes' limits."""

from __future__ import annotations

import http.client
import io
import json
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import docker.errors
from rackhealth import QUICK_BURN_S

from sparkrack.deployments.ranks import engine_containers
from sparkrack.engines import build_specs, docker_sdk_kwargs
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import nodelimits
from sparkrack.safety.burn import burn


def quick_burn(inventory, nodes, fleet=None):
    """The clock-cap gate's under-load check, QUICK_BURN_S long."""
    return burn(inventory, nodes, seconds=QUICK_BURN_S, fleet=fleet)


def nothing_runs(inventory) -> list:
    """Every engine container on the rack (running or not); docker answered on every node."""
    with Fleet(inventory) as fleet:
        ranks, errors = engine_containers(fleet)
    assert not errors
    return ranks


class Lines:
    """A subprocess's text stream read line by line in a thread, as it comes."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.ended = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> bool:
        """Whether a line starting with prefix came within timeout (False at once when the
        stream ended without one)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self.ended or any(line.startswith(prefix) for line in self.lines),
                timeout) and any(line.startswith(prefix) for line in self.lines)

    def text(self, timeout: float = 30) -> str:
        """Everything read, once the stream ended (or timeout passed)."""
        with self._changed:
            self._changed.wait_for(lambda: self.ended, timeout)
            return "".join(self.lines)


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
            kwargs, _ = nodelimits.fit_kwargs(kwargs, self._limits[spec.node])
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
