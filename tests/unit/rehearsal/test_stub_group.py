"""Stub TP groups on loopback (no rack): rendezvous, readiness, the OpenAI API with paced
SSE, dead-rank propagation, the drain, faults, unified memory and the indexer leak.

Every rank is a local process running sparkrack.rehearsal.stub.engine against one private
gpusimd (port 0, state in tmp); workers get their own HTTP ports since they share one
address. The same behaviour on the rehearsal rack: tests/integration/test_stub_rack.py.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from freeport import free_port

from sparkrack.rehearsal.stub.modeldir import model_files

REPO = Path(__file__).resolve().parents[3]
SIM_DIR = REPO / "sparkrack" / "rehearsal" / "sim"
RUNNER = ("import sys; sys.argv[0] = {prog!r}; "
          "from sparkrack.rehearsal.stub.engine import main; main({engine!r})")
EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
GiB = 1 << 30
MiB = 1 << 20


def eventually(check, timeout: float = 10.0):
    """check()'s first true value within timeout (polled), else its last value: a state the
    test waits for, however busy the machine, instead of a sleep."""
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value




class GpuSim:
    """A private gpusimd (meminfo and state under tmp)."""

    def __init__(self, tmp: Path):
        self.state_dir = tmp / "run"
        config = tmp / "node.json"
        config.write_text(json.dumps({"node": "local", "port": 0, "state_dir": str(tmp / "run"),
                                      "latch_file": str(tmp / "latched")}))
        self.log = tmp / "gpusimd.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([str(SIM_DIR / "gpusim" / "gpusimd")], stderr=log,
                                         env={**os.environ, "GPU_SIM_CONFIG": str(config)})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log.read_text())
            if found:
                self.port = int(found.group(1))
                return
            time.sleep(0.02)
        raise AssertionError("gpusimd did not start: " + self.log.read_text())

    def state(self) -> dict:
        if str(SIM_DIR) not in sys.path:
            sys.path.insert(0, str(SIM_DIR))
        from gpusim.client import GpuSimClient
        with GpuSimClient(("127.0.0.1", self.port)) as client:
            return client.state()

    def available(self) -> int:
        return self.state()["memory"]["available_kb"] * 1024

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


class LocalGroup:
    """nnodes stub ranks of one engine on loopback, started workers first."""

    def __init__(self, tmp: Path, gpu: GpuSim, engine: str = "sglang", nnodes: int = 3,
                 config: dict | None = None, env: dict | None = None,
                 extra: list[str] | None = None, gpus: list[GpuSim] | None = None):
        self.tmp, self.gpu, self.engine, self.nnodes = tmp, gpu, engine, nnodes
        self.gpus = gpus  # one GPU per rank, as on a rack (default: all share gpu)
        self.model = tmp / "model"
        self.model.mkdir(exist_ok=True)
        base = {"load_delay_s": 0.2, "rank_mem_gib": 1, "tokens_per_s": 40}
        for name, data in model_files({**base, **(config or {})}).items():
            (self.model / name).write_bytes(data)
        self.group_port = free_port()
        self.ports = [free_port() for _ in range(nnodes)]
        self.env = {**os.environ, "GPU_SIM_ADDR": f"127.0.0.1:{gpu.port}",
                    "SPARKRACK_STUB_RECORD_DIR": str(tmp), "PYTHONPATH": str(REPO),
                    "HOME": str(tmp), "TMPDIR": str(tmp),  # the compile caches' defaults,
                    # as in a container
                    **(env or {})}
        self.extra = extra or []
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs: dict[int, Path] = {}

    def argv(self, rank: int) -> list[str]:
        if self.engine == "sglang":
            return ["--model-path", str(self.model), "--served-model-name", "stub-model",
                    "--context-length", "131072", "--chunked-prefill-size", "4096",
                    "--mem-fraction-static", "0.80", "--max-running-requests", "2",
                    *self.extra, "--tp-size", str(self.nnodes), "--nnodes", str(self.nnodes),
                    "--node-rank", str(rank), "--dist-init-addr",
                    f"127.0.0.1:{self.group_port}", "--host", "127.0.0.1", "--port",
                    str(self.ports[rank])]
        tail = ["--host", "127.0.0.1", "--port", str(self.ports[0])] if rank == 0 \
            else ["--headless"]
        return ["serve", str(self.model), "--served-model-name", "stub-model",
                "--max-model-len", "131072", *self.extra, "--tensor-parallel-size",
                str(self.nnodes), "--distributed-executor-backend", "mp", "--nnodes",
                str(self.nnodes), "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                "--master-port", str(self.group_port), *tail]

    def start(self, rank: int, argv: list[str] | None = None) -> subprocess.Popen:
        prog = "launch_server.py" if self.engine == "sglang" else "vllm"
        self.logs[rank] = self.tmp / f"rank{rank}.log"
        with open(self.logs[rank], "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", RUNNER.format(prog=prog, engine=self.engine),
                 *(self.argv(rank) if argv is None else argv)],
                stdout=log, stderr=subprocess.STDOUT, env=self.env if self.gpus is None else
                {**self.env, "GPU_SIM_ADDR": f"127.0.0.1:{self.gpus[rank].port}"})
        self.procs[rank] = proc
        return proc

    def start_all(self) -> None:
        for rank in range(self.nnodes - 1, -1, -1):
            self.start(rank)

    def url(self, path: str, rank: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[rank]}{path}"

    def status(self, path: str = "/health", rank: int = 0) -> int | None:
        try:
            with urllib.request.urlopen(self.url(path, rank), timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def first_answer(self, path: str = "/health", rank: int = 0, timeout: float = 30.0) -> int | None:
        """The status of the rank's first answer (it listens), however busy the machine."""
        deadline = time.monotonic() + timeout
        while (status := self.status(path, rank)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return status

    def get(self, path: str, rank: int = 0) -> bytes:
        with urllib.request.urlopen(self.url(path, rank), timeout=5) as answer:
            return answer.read()

    def wait_healthy(self, timeout: float = 15.0) -> float:
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.status() == 200:
                return time.monotonic() - began
            for rank, proc in self.procs.items():
                assert proc.poll() is None, f"rank {rank} exited:\n{self.log(rank)}"
            time.sleep(0.05)
        raise AssertionError("head never healthy:\n" + self.log(0))

    def chat(self, words: int, max_tokens: int = 4, **extra) -> dict:
        body = {"model": "stub-model", "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": " ".join(["word"] * words)}], **extra}
        request = urllib.request.Request(self.url("/v1/chat/completions"),
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    def status_of_chat(self) -> int:
        """The HTTP status of a one-token chat completion."""
        try:
            self.chat(1, max_tokens=1)
        except urllib.error.HTTPError as error:
            return error.code
        return 200

    def stream(self, path: str, body: dict) -> tuple[int, list[tuple[float, str]]]:
        """(status, [(arrival time, data payload)]) of an SSE request."""
        connection = http.client.HTTPConnection("127.0.0.1", self.ports[0], timeout=30)
        connection.request("POST", path, json.dumps({**body, "stream": True}),
                           {"Content-Type": "application/json"})
        answer = connection.getresponse()
        events = []
        while True:
            line = answer.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                events.append((time.monotonic(), line[6:].strip().decode()))
        connection.close()
        return answer.status, events

    def wait_exit(self, timeout: float = 10.0) -> dict[int, int | None]:
        deadline = time.monotonic() + timeout
        codes = {}
        for rank, proc in sorted(self.procs.items()):
            try:
                codes[rank] = proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[rank] = None
        return codes

    def signal(self, rank: int, signum: int = signal.SIGTERM) -> None:
        self.procs[rank].send_signal(signum)

    def log(self, rank: int) -> str:
        path = self.logs.get(rank)
        return path.read_text() if path and path.exists() else ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def gpu(tmp_path):
    sim = GpuSim(tmp_path)
    yield sim
    sim.stop()


@pytest.fixture
def groups(tmp_path, gpu):
    made = []

    def make(**options) -> LocalGroup:
        folder = tmp_path / f"group{len(made)}"
        folder.mkdir()
        group = LocalGroup(folder, gpu, **options)
        made.append(group)
        return group
    yield make
    for group in made:
        group.stop()


def chat_tokens(events) -> list[tuple[float, str]]:
    found = []
    for when, data in events:
        if data == "[DONE]":
            continue
        for choice in json.loads(data)["choices"]:
            text = choice.get("delta", {}).get("content") or choice.get("text")
            if text:
                found.append((when, text))
    return found


def test_the_group_forms_serves_and_drains(groups, gpu):
    idle = gpu.available()
    group = groups(extra=[*EAGLE, "--enable-metrics"])
    group.start_all()
    group.wait_healthy()
    assert idle - gpu.available() == 3 * GiB  # each rank's share, held while loaded
    assert group.status("/health", rank=1) == group.status("/health", rank=2) == 200
    models = json.loads(group.get("/v1/models"))
    assert models["data"][0]["id"] == "stub-model"
    assert json.loads(group.get("/model_info"))["architectures"] == ["GlmMoeDsaForCausalLM"]
    info = json.loads(group.get("/server_info"))
    assert info["tp_size"] == 3 and info["internal_states"][0]["avg_spec_accept_length"] == 2.83

    answer = group.chat(12, max_tokens=5)
    assert answer["usage"] == {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    assert answer["choices"][0]["finish_reason"] == "length"
    assert len(answer["choices"][0]["message"]["content"].split()) == 5

    status, events = group.stream("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 21,
        "stream_options": {"include_usage": True}})
    tokens = chat_tokens(events)
    assert status == 200 and len(tokens) == 21 and events[-1][1] == "[DONE]"
    rate = (len(tokens) - 1) / (tokens[-1][0] - tokens[0][0])
    assert 32 < rate < 48  # configured 40 tok/s
    assert json.loads(events[-2][1])["usage"]["completion_tokens"] == 21
    status, events = group.stream("/v1/completions", {"prompt": "x y", "max_tokens": 3})
    assert len(chat_tokens(events)) == 3
    metrics = group.get("/metrics").decode()
    assert 'sglang:spec_accept_length{model_name="stub-model"} 2.83' in metrics
    assert 'sglang:generation_tokens_total{model_name="stub-model"} 29' in metrics

    # SIGTERM: a worker only logs; rank 0 drains the in-flight stream, then all exit 0.
    done = {}
    reader = threading.Thread(target=lambda: done.update(result=group.stream(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}],
                                 "max_tokens": 30})))
    reader.start()
    assert eventually(lambda: gpu.state()["util"] >= 90)  # busy while a forward runs
    group.signal(1)
    group.signal(0)
    assert eventually(lambda: group.status() == 503)  # draining
    reader.join(10)
    assert len(chat_tokens(done["result"][1])) == 30  # the drain let it finish
    assert group.wait_exit() == {0: 0, 1: 0, 2: 0}
    assert "Received SIGTERM; rank 1 waits for rank 0" in group.log(1)
    assert "Gracefully exiting... Remaining number of requests 1" in group.log(0)
    # exiting gave the memory back (a worker's scratch may come back just after it exits)
    assert eventually(lambda: gpu.available() == idle, 5), (gpu.available(), idle)
    assert gpu.state()["util"] == 0

    record = json.loads((group.tmp / "sparkrack-stub-rank2.json").read_text())
    assert record["argv"] == ["python3", "-m", "sglang.launch_server", *group.argv(2)]
    assert record["env"]["GPU_SIM_ADDR"] == f"127.0.0.1:{gpu.port}"
    first = json.loads(group.log(2).splitlines()[0])
    assert first["event"] == "start" and first["argv"] == record["argv"]


def _streaming(group, tokens: int) -> tuple[threading.Thread, dict]:
    """A streamed chat of tokens tokens in a thread of its own: (thread, its result)."""
    done: dict = {}
    reader = threading.Thread(target=lambda: done.update(result=group.stream(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}],
                                 "max_tokens": tokens})))
    reader.start()
    return reader, done


def test_sglang_drains_new_requests_too_and_only_its_health_says_503(groups, gpu):
    """SGLang 0.5.22 on SIGTERM: /health 503, new requests still taken (its tokenizer
    manager has no refusal), the drain looks every drain_poll_s until none is left."""
    group = groups(nnodes=2, config={"drain_poll_s": 0.3})
    group.start_all()
    group.wait_healthy()
    first, done = _streaming(group, 25)
    assert eventually(lambda: gpu.state()["util"] >= 90)  # prefilling or decoding
    group.signal(0)
    assert eventually(lambda: group.status() == 503)
    late, late_done = _streaming(group, 10)  # arrives while rank 0 drains
    first.join(10)
    late.join(10)
    assert len(chat_tokens(done["result"][1])) == 25
    assert late_done["result"][0] == 200 and len(chat_tokens(late_done["result"][1])) == 10
    assert group.wait_exit() == {0: 0, 1: 0}
    assert "SIGTERM received. Draining requests and shutting down..." in group.log(0)
    assert "Gracefully exiting... Remaining number of requests 0." in group.log(0)


@pytest.mark.parametrize("timeout", [None, "5"])
def test_vllm_refuses_new_requests_and_drains_up_to_its_shutdown_timeout(groups, gpu,
                                                                          timeout):
    """vLLM 0.33.0 on SIGTERM: new requests refused, /health still 200 (503 only for a dead
    engine); in-flight ones finish within --shutdown-timeout, or are aborted at once when
    it is 0, the default."""
    extra = [] if timeout is None else ["--shutdown-timeout", timeout]
    group = groups(engine="vllm", nnodes=2, extra=extra)
    group.start_all()
    group.wait_healthy()
    first, done = _streaming(group, 25)
    assert eventually(lambda: gpu.state()["util"] >= 90)  # prefilling or decoding
    group.signal(0)
    assert eventually(lambda: "[shutdown] EngineCore: start" in group.log(0))
    if timeout is None:
        first.join(10)
        assert len(chat_tokens(done["result"][1])) < 25  # cut short
        assert "aborting in-flight requests count=1" in group.log(0)
    else:
        refused = group.status_of_chat()
        assert refused == 503 and group.status() == 200
        first.join(10)
        assert len(chat_tokens(done["result"][1])) == 25
        assert "draining in-flight requests count=1 timeout=5s" in group.log(0)
    assert group.wait_exit()[0] == 0


def test_a_dead_worker_takes_the_whole_group_down(groups, gpu):
    idle = gpu.available()
    group = groups()
    group.start_all()
    group.wait_healthy()
    killed = time.monotonic()
    group.procs[2].kill()
    codes = group.wait_exit(5)
    assert time.monotonic() - killed < 2
    assert codes[0] == 1 and codes[1] == 1 and codes[2] == -signal.SIGKILL
    for rank in (0, 1):
        assert "NCCL error" in group.log(rank) and "remote process exited" in group.log(rank)
    assert "rank 2" in group.log(0)
    assert eventually(lambda: gpu.available() == idle)


def test_the_head_opens_its_port_only_once_every_rank_loaded(groups):
    """SGLang 0.5.22 starts uvicorn after its schedulers are ready (launch_server): the
    port refuses while any rank loads, then /health answers."""
    group = groups(config={"ranks": {"1": {"load_delay_s": 1.5}}})
    group.start_all()
    assert eventually(lambda: "Load weight end" in group.log(0))
    assert "Load weight end" not in group.log(1)
    assert group.status() is None  # refused: rank 1 still loads
    group.wait_healthy()
    assert "Load weight end" in group.log(1)  # it answered only once the slow rank loaded
    log = group.log(0)
    assert log.index("Uvicorn running on") < log.index("fired up and ready to roll")


def test_a_taken_http_port_fails_sglang_only_after_the_load(groups):
    group = groups(nnodes=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", group.ports[0]))
        taken.listen(1)
        group.start(0)
        assert group.procs[0].wait(EXIT_WAIT_S) == 1
    log = group.log(0)
    assert log.index("Load weight end") < log.index("error while attempting to bind on address")


EXIT_WAIT_S = 30  # a process exits in well under a second; a busy machine may take longer


def test_faults_exit_at_start_and_die_after(groups):
    group = groups(config={"ranks": {"1": {"exit_at_start": True, "exit_code": 3},
                                     "2": {"die_after_s": 1.0}}})
    group.start_all()
    assert group.procs[1].wait(EXIT_WAIT_S) == 3
    assert "exit_at_start" in group.log(1)
    group.start(1, group.argv(1)[:])  # still faulty: it exits again
    assert group.procs[1].wait(EXIT_WAIT_S) == 3
    codes = group.wait_exit(EXIT_WAIT_S)  # rank 2 dies at 1 s and takes rank 0 with it
    assert codes[2] == 1 and codes[0] == 1
    assert "die_after_s=1" in group.log(2)


def test_a_worker_signalled_before_joining_exits(groups):
    group = groups()
    group.start(1)
    assert eventually(lambda: "Init torch distributed begin" in group.log(1))
    group.signal(1)
    assert group.procs[1].wait(EXIT_WAIT_S) == 0


def test_the_leak_ratchets_without_the_budget_and_stays_flat_with_it(groups, gpu):
    held = {}
    for name, env in (("default", {}), ("budget", {"SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION":
                                                   "0.01"})):
        group = groups(env=env, config={"prefill_tokens_per_s": 100000})
        group.start_all()
        group.wait_healthy()
        loaded = gpu.available()
        held[name] = []
        for words in (2000, 4000, 8000, 4000):
            group.chat(words, max_tokens=1)
            if env:  # within the budget the scratch is given back after the answer
                eventually(lambda loaded=loaded: gpu.available() == loaded, 5)
            held[name].append((loaded - gpu.available()) // MiB)
        group.signal(0)
        assert group.wait_exit() == {0: 0, 1: 0, 2: 0}
    # 3 ranks x fp32 logits blocks of the longest prompt: 15, 61, 183 MiB per rank
    assert held["default"] == [45, 183, 549, 549]
    assert held["budget"] == [0, 0, 0, 0]


def test_vllm_head_listens_only_when_ready_and_workers_are_headless(groups, gpu):
    group = groups(engine="vllm", config={"load_delay_s": 3},
                   extra=["--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'])
    group.start_all()
    time.sleep(0.3)
    assert group.status() is None  # connection refused while the engine loads
    group.wait_healthy()
    assert group.status("/health", rank=1) is None  # headless: no HTTP at all
    answer = group.chat(3, max_tokens=6)
    assert answer["usage"]["completion_tokens"] == 6
    metrics = group.get("/metrics").decode()
    drafts = int(re.search(r"vllm:spec_decode_num_drafts_total\S* (\d+)", metrics).group(1))
    accepted = int(re.search(r"vllm:spec_decode_num_accepted_tokens_total\S* (\d+)",
                             metrics).group(1))
    assert 1 + accepted / drafts == pytest.approx(2.83, abs=0.5)
    assert json.loads(group.get("/version")) == {"version": "0.33.0"}
    wrong = urllib.request.Request(group.url("/v1/chat/completions"), data=json.dumps(
        {"model": "other", "messages": [{"role": "user", "content": "x"}]}).encode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(wrong, timeout=5)
    assert refused.value.code == 404
    group.signal(0)
    assert group.wait_exit() == {0: 0, 1: 0, 2: 0}


def test_startup_errors_exit_1_like_the_engines(groups):
    group = groups()
    (group.model / "sparkrack-stub.json").write_text('{"tokens_per_sec": 5}')
    group.start(0)
    assert group.procs[0].wait(10) == 1
    assert "unknown key 'tokens_per_sec'" in group.log(0)
    (group.model / "config.json").unlink()
    group.start(0)
    assert group.procs[0].wait(10) == 1
    assert "config.json" in group.log(0)
    group.start(0, group.argv(0) + ["--bogus"])
    assert group.procs[0].wait(10) == 2
    assert "unrecognized arguments: --bogus" in group.log(0)


def test_the_ratchet_ends_in_no_memory_a_stuck_rank_and_the_watchdog(groups):
    """The field report's failure: the scratch reaches the floor, the driver refuses, a
    rank is stuck allocating, /health fails, the watchdog takes the group down."""
    group = groups(config={"rank_mem_gib": 35, "indexer_scale": 100, "health_timeout_s": 0.5,
                           "prefill_tokens_per_s": 100000},
                   extra=["--watchdog-timeout", "5"])
    group.start_all()
    group.wait_healthy()
    request = threading.Thread(target=lambda: pytest.raises(OSError, group.chat, 8000, 1))
    request.start()
    assert eventually(lambda: group.status() == 503, 4)  # a stuck rank no longer answers
    codes = group.wait_exit(10)
    request.join(5)
    assert codes[0] == 1 and set(codes.values()) == {1}
    logs = "".join(group.log(rank) for rank in range(3))
    assert "NV_ERR_NO_MEMORY" in logs
    assert "Watchdog timeout (self.watchdog_timeout=5)" in group.log(0)


@pytest.fixture
def rank_gpus(tmp_path):
    """Three GPUs, one per rank, as each node of a rack has its own."""
    sims = []
    for rank in range(3):
        (tmp_path / f"gpu{rank}").mkdir()
        sims.append(GpuSim(tmp_path / f"gpu{rank}"))
    yield sims
    for sim in sims:
        sim.stop()


def reads(sim: GpuSim) -> tuple[int, float]:
    state = sim.state()
    return state["util"], state["power_w"]


def loads(sims: list[GpuSim]) -> list[str]:
    """What each GPU's load does (gpusimd's own view: decode, compute, spin, drained,
    idle); the readings nvidia-smi gives of each are checked beside it."""
    return [sim.state()["sim"]["load"] for sim in sims]


def generated(group) -> float:
    return metrics_of(group)["vllm:generation_tokens_total"]


def decoding(reading: tuple[int, float]) -> bool:
    return 90 <= reading[0] <= 99


def test_a_frozen_rank_stops_every_token_its_gpu_idles_while_its_peers_spin(groups,
                                                                            rank_gpus):
    """Rank 2's process stopped mid-answer (SIGSTOP, as a host-side deadlock leaves it):
    the next collective never completes, no token moves, its GPU drains (0 %, its clock and
    a spin's draw held) and its peers' GPUs read as ranks waiting in a collective do (~96 %
    at 16-27 W); once it runs again the tokens move and every GPU decodes."""
    group = groups(engine="vllm", gpus=rank_gpus,
                   config={"tokens_per_s": 40, "answer_tokens": 2000})
    group.start_all()
    group.wait_healthy()
    request = threading.Thread(target=lambda: pytest.raises(OSError, group.chat, 5, 2000),
                               daemon=True)
    request.start()
    assert eventually(lambda: generated(group) > 5, 10)
    assert loads(rank_gpus) == ["decode"] * 3
    assert all(decoding(reads(sim)) for sim in rank_gpus), [reads(sim) for sim in rank_gpus]
    group.signal(2, signal.SIGSTOP)
    try:
        assert eventually(lambda: loads(rank_gpus) == ["spin", "spin", "drained"], 10), \
            loads(rank_gpus)
        assert [reads(sim)[0] for sim in rank_gpus] == [96, 96, 0]
        assert all(16 <= reads(sim)[1] <= 27 for sim in rank_gpus), [reads(s) for s in rank_gpus]
        frozen = generated(group)
        time.sleep(1.0)
        assert generated(group) == frozen
    finally:
        group.signal(2, signal.SIGCONT)
    assert eventually(lambda: generated(group) > frozen + 5, 10)
    assert eventually(lambda: loads(rank_gpus) == ["decode"] * 3, 10)


def test_a_long_prefill_computes_on_every_gpu_and_fills_the_kv_cache_chunk_by_chunk(
        groups, rank_gpus):
    """No token moves during a 4 s prefill of four 100-token chunks, yet the collectives
    complete: from the moment every rank runs it, every GPU reads 100 % (matmuls, not
    decode's swings) and none spins or drains while the request runs; the KV-cache gauge the
    engine sets every step grows with each chunk: progress a watchdog can read.

    Judged from when every GPU computes, not from the first one: the forward's first
    collective waits for each rank to take its scratch, and a rank kept waiting there spins
    as a real one does (on a busy machine rank 0 read 96 % there, and rank 2, not yet
    begun, 0 %). Sampled for as long as the request runs, however slowly the
    machine lets the sampler go: no count of samples within a time is assumed, and the
    gauge is judged up to its peak (the request's tokens are freed before its answer
    arrives). It decodes 25 tokens (0.5 s at the stub's 50 tokens/s), so the full cache
    is held long enough to be sampled: with 2 (40 ms) a CI run's sampler missed it."""
    group = groups(engine="vllm", gpus=rank_gpus, config={"prefill_tokens_per_s": 100},
                   extra=["--max-num-batched-tokens", "100"])
    group.start_all()
    group.wait_healthy()
    request = threading.Thread(target=lambda: group.chat(400, 25), daemon=True)
    request.start()
    assert eventually(lambda: loads(rank_gpus) == ["compute"] * 3, 10), loads(rank_gpus)
    states, usage = [], []
    while request.is_alive():
        states.append([sim.state() for sim in rank_gpus])
        usage.append(metrics_of(group)["vllm:kv_cache_usage_perc"])
        time.sleep(0.05)
    kinds = [[gpu["sim"]["load"] for gpu in state] for state in states]
    prefill = list(itertools.takewhile(lambda state: all(
        gpu["sim"]["load"] == "compute" for gpu in state), states))
    assert len(prefill) >= 3, kinds
    assert all(gpu["util"] == 100 for state in prefill for gpu in state), prefill
    assert not any(kind in ("spin", "drained") for row in kinds for kind in row), kinds
    peak = usage.index(max(usage))
    assert usage[:peak + 1] == sorted(usage[:peak + 1]), usage  # chunk after chunk
    assert len(set(usage[:peak + 1])) >= 3 and max(usage) >= 400 / 131072, usage
    request.join(10)
    assert eventually(lambda: metrics_of(group)["vllm:kv_cache_usage_perc"] == 0, 5)


def test_a_collective_that_never_completes_spins_its_rank_while_its_peers_wait(groups,
                                                                               rank_gpus):
    """The node's NCCL hangs (the rehearsal's collective-hang fault, vllm#42354's pattern):
    rank 1's kernel spins (~96 % at 16-27 W) while rank 0, blocked before its next
    broadcast, and rank 2, waiting for it, drain; no token moves, every process lives and
    vLLM's /health stays 200. On every node (NCCL's hang on every rank): all spin."""
    group = groups(engine="vllm", gpus=rank_gpus,
                   config={"tokens_per_s": 40, "answer_tokens": 2000})
    group.start_all()
    group.wait_healthy()
    request = threading.Thread(target=lambda: pytest.raises(OSError, group.chat, 5, 2000),
                               daemon=True)
    request.start()
    assert eventually(lambda: generated(group) > 5, 10)
    (rank_gpus[1].state_dir / "collective-hang").write_text("")
    assert eventually(lambda: loads(rank_gpus) == ["drained", "spin", "drained"], 10), \
        loads(rank_gpus)
    assert [reads(sim)[0] for sim in rank_gpus] == [0, 96, 0]
    assert all(16 <= reads(sim)[1] <= 27 for sim in rank_gpus)
    time.sleep(1.2)  # a token needs a collective completed within the last second
    stood = generated(group)
    time.sleep(1.0)
    assert generated(group) == stood and group.status() == 200
    assert all(proc.poll() is None for proc in group.procs.values())
    assert "NCCL hangs the collective" in group.log(1)
    for proc in group.procs.values():
        proc.kill()
    every = groups(engine="vllm", gpus=rank_gpus, config={"tokens_per_s": 40,
                                                          "answer_tokens": 2000})
    for sim in rank_gpus:
        (sim.state_dir / "collective-hang").unlink(missing_ok=True)
    every.start_all()
    every.wait_healthy()
    request = threading.Thread(target=lambda: pytest.raises(OSError, every.chat, 5, 2000),
                               daemon=True)
    request.start()
    assert eventually(lambda: generated(every) > 5, 10)
    for sim in rank_gpus:
        (sim.state_dir / "collective-hang").write_text("")
    assert eventually(lambda: loads(rank_gpus) == ["spin"] * 3, 10), loads(rank_gpus)


def metrics_of(group) -> dict[str, float]:
    from sparkrack.deployments.headapi import parse_prometheus

    return parse_prometheus(group.get("/metrics").decode())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_wedged_rank_stops_the_tokens_while_its_process_lives(groups, gpu, engine):
    """wedge_at_request: rank 2's host hangs in the second forward: no token
    moves, the counters stand, every process lives; vLLM's /health stays 200 (it answers
    503 only once the engine has errored), SGLang's (a generation) fails; the engine's own
    watchdog ends the group."""
    group = groups(engine=engine, config={"ranks": {"2": {"wedge_at_request": 2}},
                                          "health_timeout_s": 0.5},
                   extra=["--enable-metrics", "--watchdog-timeout", "6"] if engine == "sglang"
                   else [])
    group.start_all()
    group.wait_healthy()
    assert group.chat(5, max_tokens=3)["usage"]["completion_tokens"] == 3
    prefix = "sglang:" if engine == "sglang" else "vllm:"
    running = "sglang:num_running_reqs" if engine == "sglang" else "vllm:num_requests_running"
    before = metrics_of(group)
    request = threading.Thread(target=lambda: pytest.raises(OSError, group.chat, 5, 3))
    request.start()
    assert eventually(lambda: metrics_of(group)[running] == 1, 4)
    time.sleep(1.5)
    after = metrics_of(group)
    assert after[running] == 1
    for counter in ("prompt_tokens_total", "generation_tokens_total"):
        assert after[prefix + counter] == before[prefix + counter]
    assert all(proc.poll() is None for proc in group.procs.values())
    assert "wedged in forward 2" in group.log(2)
    if engine == "vllm":
        assert group.status() == 200
        for proc in group.procs.values():
            proc.kill()
    else:
        assert eventually(lambda: group.status() == 503, 4)
        assert set(group.wait_exit(15).values()) == {1}
        assert "Watchdog timeout (self.watchdog_timeout=6)" in group.log(0)
    request.join(10)


def test_sglang_serves_metrics_only_with_enable_metrics(groups):
    group = groups()
    group.start_all()
    group.wait_healthy()
    assert group.status("/metrics") == 404


def test_the_needle_is_found_within_reach_and_not_beyond(groups):
    """The bench's needle row against a stub group: pass when the haystack is within what
    the stub recalls, FAIL beyond it; a prompt over the context is the engines' HTTP 400."""
    from sparkrack.bench.result import rows
    from sparkrack.bench.run import SUITES, Bench
    from sparkrack.bench.target import Target
    from sparkrack.deployments.headapi import Endpoint
    from sparkrack.deployments.record import Deployment
    from sparkrack.engines.serving import engine_serving
    from sparkrack.inventory import Node
    from sparkrack.inventory.schema import RackVars

    group = groups(nnodes=2, config={"tokens_per_s": 400, "prefill_tokens_per_s": 400000,
                                     "recall_tokens": 3000})
    group.start_all()
    group.wait_healthy()
    node = Node("local", "127.0.0.1", 22, "root", None, 0, "127.0.0.1", RackVars())
    endpoint = Endpoint(node, group.ports[0], "stub-model")
    deployment = Deployment(engine="sglang", profile="p", deployment_id="d", spec_hash="f" * 64,
                            image="i", image_id="sha256:x")
    target = Target(deployment, node="local", address="127.0.0.1", port=group.ports[0],
                    model="stub-model", context_length=131072,
                    metrics=engine_serving(REPO / "inventory" / "rehearsal", "sglang").metrics)

    def needle(context: int):
        bench = Bench(target, endpoint, SUITES["quick"], name=f"n{context}", context=context,
                      max_tokens=2)
        result = bench.run()
        assert bench.error is None and not result.partial, result.notes
        return result, {row.key: row.value for row in rows(result)}["needle.found"]

    within, found = needle(2048)
    assert found is True and within.needle.answer == prompts_passphrase(within)
    assert 1800 < within.needle.prompt_tokens <= 2048
    beyond, found = needle(4096)  # ~3,900 tokens: past the 3,000 this stub recalls
    assert found is False and beyond.needle.prompt_tokens > 3000
    assert prompts_passphrase(beyond) not in beyond.needle.answer
    assert "beyond the 3000 tokens this stub recalls" in group.log(0)

    with pytest.raises(urllib.error.HTTPError) as over:  # 10 + 131,070 > 131,072
        group.chat(10, max_tokens=131070)
    assert over.value.code == 400
    assert "maximum context length is 131072 tokens" in over.value.read().decode()


def prompts_passphrase(result) -> str:
    """The passphrase the bench hid in its needle prompt for this result."""
    from sparkrack.bench import prompts
    return prompts.passphrase(f"{result.name}:{result.needle.context}")


def test_without_recall_tokens_the_stub_recalls_its_whole_context(groups):
    group = groups(nnodes=2, engine="vllm")
    group.start_all()
    group.wait_healthy()
    from sparkrack.bench import prompts
    text = prompts.haystack(3000, "amber-cobalt-1234")
    body = {"model": "stub-model", "max_tokens": 16,
            "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(group.url("/v1/chat/completions"),
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        data = json.loads(answer.read())
    assert data["choices"][0]["message"]["content"] == "amber-cobalt-1234"
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_ttft_and_inter_token_latency_are_histograms_as_the_engine_exposes_them(groups, engine):
    """The dashboard's and the alerts' latency series: each engine's own histogram names,
    labels and default buckets; 2 requests of 5 tokens: 2 first tokens, 8 gaps of ~1/40 s."""
    from prometheus_client.parser import text_string_to_metric_families

    group = groups(nnodes=2, engine=engine, config={"tokens_per_s": 40},
                   extra=["--enable-metrics"] if engine == "sglang" else [])
    group.start_all()
    group.wait_healthy()
    for _ in range(2):
        assert group.chat(5, max_tokens=5)["usage"]["completion_tokens"] == 5
    families = {f.name: f for f in text_string_to_metric_families(
        group.get("/metrics").decode())}
    labels = {"model_name": "stub-model", **({"engine": "0"} if engine == "vllm" else {})}
    for metric, count, top in (("time_to_first_token_seconds", 2, 2560.0 if engine == "vllm"
                                else 400.0), ("inter_token_latency_seconds", 8,
                                              80.0 if engine == "vllm" else 8.0)):
        family = families[f"{engine}:{metric}"]
        assert family.type == "histogram"
        samples = {(s.name, s.labels.get("le")): s for s in family.samples}
        assert all({k: v for k, v in s.labels.items() if k != "le"} == labels
                   for s in family.samples)
        assert samples[f"{engine}:{metric}_count", None].value == count
        assert samples[f"{engine}:{metric}_bucket", "+Inf"].value == count
        assert samples[f"{engine}:{metric}_bucket", repr(top)].value == count
    gaps = families[f"{engine}:inter_token_latency_seconds"].samples
    mean = next(s.value for s in gaps if s.name.endswith("_sum")) / 8
    assert 0.01 < mean < 0.1  # 40 tok/s: 25 ms apart
