"""One rank of a stub SGLang or vLLM TP group (stdlib only; runs inside the stub image).

Life of a rank, as in a real TP group:
1. record argv and environment (one JSON line on stdout, /tmp/sparkrack-stub-rank<R>.json);
2. parse the real command line (cli.py: unknown flag -> exit 2; refused config -> exit 1);
3. read {model_path}/sparkrack-stub.json (config.py); faults: exit_at_start, die_after_s;
   a lane fetching from a gated Hub repo (gated_repo) reads its Hugging Face token as
   huggingface_hub does (hubtoken.py) and without one fails as the engine does;
4. join the group (group.py): rank 0 listens on the dist-init / master port, ranks >= 1
   connect, retrying until the dist timeout (600 s, SGLang --dist-timeout);
5. load: take the rank's share of the node's unified memory from gpusimd in steps over
   load_delay_s (held until the process ends); then compile the kernels, or read them
   from the node's compile caches (compilecache.py); ranks >= 1 report "loaded";
6. rank 0 is ready once every rank has loaded. SGLang: rank 0 answers /health 503 from
   the start and 200 when ready (each check pings every rank, as SGLang's 1-token
   generation does); ranks >= 1 open their dummy /health (200) once loaded. vLLM: rank 0
   binds its port early but listens only when ready (connections are refused while the
   engine loads, as vLLM's API server starts after the engine); headless ranks serve no
   HTTP;
7. serve: every request is a forward of the whole group (every rank takes its indexer
   scratch and holds the GPU busy while it runs); tokens stream at tokens_per_s. While any
   forward runs, rank 0 drives the group's collectives every STEP_S (`step`: each rank
   first sends its ring neighbour one RDMA write's packet on each rail, then answers), and
   a token moves only while they complete: a rank that stops answering (frozen, hung, cut
   off by the fabric) stops every token, and every rank left waiting in the collective
   reads as NCCL's kernel does (gpu.py: spinning at low power);
8. SIGTERM on rank 0 drains: new requests and /health get 503, in-flight ones finish
   (vLLM: at most --shutdown-timeout s when given), then the workers are told to exit
   and every rank exits 0. SIGTERM on a rank >= 1 is only logged once it has joined (it
   waits for rank 0); before joining it exits 0. A rank whose link drops takes the group
   down: every rank exits 1 with an NCCL-like line. A forward that does not complete
   (a silent peer, a rank stuck on an out-of-memory allocation) kills the group after the
   watchdog (SGLang --watchdog-timeout, 300 s).

Prompt tokens are counted as whitespace-separated words (chat: over every message's
text); completion tokens are the words emitted, one SSE chunk each. A prompt and its
max_tokens longer than the context (--context-length / --max-model-len, else the model's
max_position_embeddings) get the engines' HTTP 400. The answer is filler words, except to
the bench's needle-in-a-haystack prompt: the stub finds the passphrase ("The secret
passphrase of the rack is X.") when the prompt is within its context, or within
recall_tokens when the stub settings give that, and answers filler otherwise.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager

from . import cli, compilecache, hubtoken, leak, transport
from . import config as stubconfig
from .gpu import GiB, Gpu, NoDevice, OutOfMemory
from .group import HeadGroup, Link, connect_to_head, nccl_error
from .latency import Latency
from .server import Reply, Server, Stream, error_body

RECORD_NAME = "sparkrack-stub-rank{rank}.json"  # in /tmp ($SPARKRACK_STUB_RECORD_DIR: tests)
LOAD_STEPS = 8
STEP_S = 0.25  # between the group's collectives while a forward runs
STEP_FRESH_S = 1.0  # a token waits for a collective completed this recently
SECRET_MARKS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")
ENTRY = {"sglang": ["python3", "-m", "sglang.launch_server"], "vllm": ["vllm"]}
VERSIONS = {engine: cli.installed_version(engine) for engine in ("sglang", "vllm")}
NEEDLE = re.compile(r"secret passphrase of the rack is ([A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)")
WORDS = ("the", "rack", "serves", "one", "model", "across", "eight", "nodes", "and", "every",
         "rank", "holds", "its", "share", "of", "unified", "memory", "while", "tokens", "flow",
         "from", "head", "to", "client", "at", "a", "steady", "rate", "so", "that", "operators",
         "can", "watch", "power", "clocks", "drain", "roll", "lanes", "safely", "under", "load")


# --- Output and exit --------------------------------------------------------------------------

class Log:
    """Engine-flavoured log lines on stdout (errors on stderr), flushed at once."""

    def __init__(self, engine: str, rank: int):
        self.engine = engine
        self.rank = rank

    def __call__(self, message: str, level: str = "INFO") -> None:
        now = time.time()
        if self.engine == "sglang":
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            line = f"[{stamp} TP{self.rank}] {message}"
        else:
            stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(now))
            line = f"{level} {stamp} [rank{self.rank}] {message}"
        stream = sys.stderr if level == "ERROR" else sys.stdout
        print(line, file=stream, flush=True)


_dying = threading.Lock()


def die(code: int, message: str | None = None, log: Log | None = None) -> None:
    """Print message (stderr) and end the process now with code, from any thread."""
    if not _dying.acquire(blocking=False):
        time.sleep(3600)  # another thread is already ending the process
    if message:
        if log is not None:
            for line in message.splitlines():
                log(line, "ERROR")
        else:
            print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _shown_env(env: dict[str, str]) -> dict[str, str]:
    """env with secret-looking values (HF_TOKEN, ...) replaced by *** for the logs."""
    return {key: "***" if any(mark in key.upper() for mark in SECRET_MARKS) else value
            for key, value in env.items()}


def _cmdline() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0")[:-1]]
    except OSError:
        return list(sys.argv)


def record_start(engine: str, argv: list[str]) -> dict:
    """Print the start record (secrets shown as ***) and write it, in full, to
    /tmp/sparkrack-stub-rank<R>.json (mode 0600); returns the record."""
    rank = cli.scan_rank(argv)
    env = dict(os.environ)
    record = {"sparkrack_stub": engine, "event": "start", "rank": rank,
              "argv": ENTRY[engine] + list(argv), "cmdline": _cmdline(), "env": env,
              "pid": os.getpid(), "node": socket.gethostname(), "time": time.time(),
              "version": VERSIONS[engine]}
    print(json.dumps({**record, "env": _shown_env(env)}, sort_keys=True), flush=True)
    path = os.path.join(os.environ.get("SPARKRACK_STUB_RECORD_DIR", "/tmp"),
                        RECORD_NAME.format(rank=rank))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, sort_keys=True, indent=1)
    except OSError as error:
        print(f"sparkrack stub: cannot write {path}: {error}", file=sys.stderr, flush=True)
    return record


# --- Text -----------------------------------------------------------------------------------

def count_tokens(text: str) -> int:
    """Prompt tokens as the stub counts them: whitespace-separated words."""
    return len(text.split())


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def token_text(index: int, seed: int) -> str:
    """The index-th completion token: a word, with a leading space after the first."""
    word = WORDS[(seed + index * 7) % len(WORDS)]
    return word if index == 0 else " " + word


# --- Ranks ----------------------------------------------------------------------------------

class Rank:
    """What every rank has: its args, settings, GPU and indexer scratch."""

    def __init__(self, args: cli.EngineArgs, settings: stubconfig.RankConfig, gpu: Gpu,
                 scratch: leak.IndexerScratch | None, log: Log, started: float):
        self.args = args
        self.settings = settings
        self.gpu = gpu
        self.scratch = scratch
        self.log = log
        self.started = started
        self.stop = threading.Event()  # SIGTERM / SIGINT received
        self.kept: list[int | None] = []  # allocations held for the process lifetime
        self.stuck = False  # an allocation failed mid-forward: this rank no longer answers
        self.forwards = 0  # forwards this rank has begun (the wedge_at_request fault)
        self.transport_fault: transport.Fault | None = None  # NCCL fails it after the rendezvous
        self.endpoints: dict = {}  # what its peers must reach (transport.endpoints)
        self.ring: list[tuple[str, str, str, int]] = []  # its rails to the next rank

    def init_nccl(self, peers: dict) -> None:
        """The NCCL communicator's init, right after the rendezvous, and its first
        collective: a transport environment that does not fit the node, or a fabric that
        drops the RDMA writes to the ring neighbour (peers: {rank: its RoCE addresses}),
        ends this rank (and so the group) as NCCL would."""
        self.ring = self._ring_of(peers)
        fault = self.transport_fault or self.ring_writes()
        if fault is None:
            return
        if fault.library == "advertise":  # no error anywhere: the group just never forms
            self.log(f"NCCL version {transport.NCCL_VERSION}+cuda13.0 init done; waiting for "
                     "peers")
            self.stop.wait()
            die(0, log=self.log)
        pid = os.getpid()
        print(f"{socket.gethostname()}:{pid}:{pid} [0] NCCL WARN {fault.warning}", flush=True)
        die(1, f"[rank{self.args.rank}]: {fault.error}", self.log)

    def _ring_of(self, peers: dict) -> list[tuple[str, str, str, int]]:
        """(HCA, own address, the next rank's address on that rail, path MTU) per rail."""
        nnodes = self.args.nnodes
        theirs = peers.get(str((self.args.rank + 1) % nnodes), []) if nnodes > 1 else []
        interfaces = transport.local_interfaces()
        return [(hca, src, dst, transport.ib_mtu(transport.netdev_mtu(src, interfaces) or 1500))
                for (hca, src), dst in zip(transport.rails(self.endpoints), theirs)]

    def ring_writes(self) -> transport.Fault | None:
        """Each rail's RDMA write to the same rail of the next rank, at the path MTU its
        netdev gives (what goes unacknowledged: NCCL's retry-exceeded)."""
        for hca, src, dst, mtu in self.ring:
            if not transport.first_write(src, dst, mtu + transport.WRITE_OVERHEAD):
                return transport.write_fault(hca, src, dst, mtu)
        return None

    def step_writes(self) -> None:
        """A collective's writes; a fabric that drops them ends the rank (and the group) as
        NCCL does once the HCA's retries are spent."""
        fault = self.ring_writes()
        if fault is not None:
            pid = os.getpid()
            print(f"{socket.gethostname()}:{pid}:{pid} [0] NCCL WARN {fault.warning}",
                  flush=True)
            die(1, f"[rank{self.args.rank}]: {fault.error}", self.log)

    def load(self) -> None:
        """Take the rank's memory in LOAD_STEPS steps spread over load_delay_s."""
        total = self.gpu.total_bytes()
        size = int(self.settings.rank_mem_gib * GiB if self.settings.rank_mem_gib is not None
                   else self.args.mem_fraction * total)
        delay = self.settings.load_delay_s
        self.log(f"Load weight begin. avail mem={self.gpu.available_bytes() / GiB:.2f} GB")
        begin = time.monotonic()
        step = size // LOAD_STEPS
        for index in range(LOAD_STEPS):
            part = step if index < LOAD_STEPS - 1 else size - step * (LOAD_STEPS - 1)
            self._take(part, total, "weights and KV cache")
            pause = begin + delay * (index + 1) / LOAD_STEPS - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        self.log(f"Load weight end. mem usage={size / GiB:.2f} GB, avail mem="
                 f"{self.gpu.available_bytes() / GiB:.2f} GB, "
                 f"took {time.monotonic() - begin:.2f} s")

    def compile(self) -> None:
        """After the load: compile what this rank runs, or read it from the caches."""
        compilecache.warm_up(self.args.engine, VERSIONS[self.args.engine], self.args.rank,
                             self.args.namespace, self.gpu.compute_cap(),
                             self.settings.compile_s, dict(os.environ), self.log)

    def _take(self, size: int, total: int, what: str) -> None:
        try:
            self.kept.append(self.gpu.allocate(size))
        except OutOfMemory as error:
            die(1, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                   f"{size / GiB:.2f} GiB ({what}). GPU 0 has a total capacity of "
                   f"{total / GiB:.2f} GiB ({error})", self.log)

    def scratch_begin(self, prompt_tokens: int) -> int | None:
        """Take this forward's indexer scratch (SGLang); the transient allocation's id.
        An allocation the driver refuses leaves the rank stuck (it answers no more)."""
        if self.scratch is None or self.stuck:
            return None
        kept, transient = self.scratch.begin(prompt_tokens)
        try:
            if kept:
                self.kept.append(self.gpu.allocate(kept))
            return self.gpu.allocate(transient) if transient else None
        except OutOfMemory as error:
            self.stuck = True
            self.gpu.hang()
            self.log(f"NVRM: NV_ERR_NO_MEMORY: allocating MoE workspace after a "
                     f"{prompt_tokens}-token prefill ({error}); this rank is stuck", "ERROR")
            return None

    def wedges(self, prompt_tokens: int) -> bool:
        """Count a forward; whether it wedges this rank (the wedge_* faults): its host hangs
        (answers nothing more, launches nothing: its GPU drains to idle) while its process
        lives on."""
        self.forwards += 1
        s = self.settings
        if self.stuck or not ((s.wedge_at_request is not None
                               and self.forwards >= s.wedge_at_request)
                              or (s.wedge_above_tokens is not None
                                  and prompt_tokens > s.wedge_above_tokens)):
            return self.stuck
        self.stuck = True
        self.gpu.hang()
        self.log(f"sparkrack stub fault: wedged in forward {self.forwards} "
                 f"({prompt_tokens}-token prompt)", "WARNING")
        return True

    def check_die_after(self) -> None:
        """Arm the die_after_s fault (seconds after the process started)."""
        seconds = self.settings.die_after_s
        if seconds is None:
            return
        left = max(0.0, self.started + seconds - time.monotonic())

        def fire():
            die(self.settings.exit_code,
                f"RuntimeError: CUDA error: an illegal memory access was encountered "
                f"(sparkrack stub fault: die_after_s={seconds:g})", self.log)
        timer = threading.Timer(left, fire)
        timer.daemon = True
        timer.start()


class Worker(Rank):
    """A rank >= 1: joins rank 0, loads, then follows the head's forwards."""

    joined = False
    link: Link | None = None
    steps: queue.SimpleQueue | None = None

    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.joined:
            self.log(f"Received {name} before joining the group; exiting.")
            die(0)
        self.log(f"Received {name}; rank {self.args.rank} waits for rank 0 to shut the "
                 "group down.")

    def run(self) -> None:
        args = self.args
        deadline = time.monotonic() + args.dist_timeout_s
        self.log(f"Init torch distributed begin. rank {args.rank}/{args.nnodes}, rank 0 at "
                 f"{args.head_host}:{args.group_port}")
        sock = connect_to_head(args.head_host, args.group_port, deadline, self.stop, self.log)
        if sock is None:
            die(1, f"torch.distributed.DistNetworkError: The client socket has timed out "
                   f"after {args.dist_timeout_s:g} s while trying to connect to "
                   f"({args.head_host}, {args.group_port}).", self.log)
        link = self.link = Link(sock, f"{args.head_host}:{args.group_port}")
        self.steps = queue.SimpleQueue()
        link.send("hello", rank=args.rank, nnodes=args.nnodes, engine=args.engine,
                  node=socket.gethostname(), pid=os.getpid(), endpoints=self.endpoints)
        while True:
            message = link.recv()
            if message is None:
                self._head_lost("rank 0 closed the connection during rendezvous")
            if message.get("op") == "reject":
                die(1, f"torch.distributed.DistStoreError: rank 0 refused rank {args.rank}: "
                       f"{message.get('reason')}", self.log)
            if message.get("op") == "shutdown":
                self.log("rank 0 shut down before the group formed; exiting.")
                die(0)
            if message.get("op") == "abort":
                die(1, nccl_error(args.rank, message.get("reason", "group aborted")), self.log)
            if message.get("op") == "joined":
                break
        self.joined = True
        self.log("Init torch distributed ends.")
        self.init_nccl(message.get("rails") or {})
        threading.Thread(target=self._follow, name="follow", daemon=True).start()
        threading.Thread(target=self._answer_steps, name="steps", daemon=True).start()
        self.load()
        self.compile()
        link.send("loaded")
        if args.engine == "sglang" and args.http_port is not None:
            try:
                Server(args.http_host, args.http_port, self._routes).serve_in_background()
            except OSError as error:
                die(1, f"ERROR: [Errno {error.errno}] error while attempting to bind on "
                       f"address ({args.http_host!r}, {args.http_port}): {error.strerror}",
                    self.log)
            self.log(f"Dummy health check server started on {args.http_host}:"
                     f"{args.http_port}")
        self.log("Rank loaded; waiting for rank 0.")
        while True:
            time.sleep(3600)

    def _routes(self) -> dict:
        return {("GET", "/health"): lambda body: Reply(200)}

    def _answer_steps(self) -> None:
        """Join each of the head's collectives in order: the ring writes, then the answer
        (a write the fabric drops leaves the head, and so every rank, waiting)."""
        while True:
            step = self.steps.get()
            self.step_writes()
            if not self.stuck:
                self.link.send("ack", id=step)

    def _head_lost(self, why: str) -> None:
        die(1, nccl_error(self.args.rank, f"{why} (peer rank 0 at {self.link.peer})"),
            self.log)

    def _follow(self) -> None:
        """Handle the head's messages until shutdown, abort or a dropped link."""
        link = self.link
        transients: dict[int, int | None] = {}
        while True:
            message = link.recv()
            if message is None:
                self._head_lost("rank 0 closed the connection")
            op = message.get("op")
            if op == "begin" and not self.stuck:
                prompt_tokens = int(message.get("prompt_tokens", 0))
                transient = self.scratch_begin(prompt_tokens)
                if self.stuck or self.wedges(prompt_tokens):
                    continue  # no ack: rank 0's forward waits until its watchdog
                transients[message.get("fid")] = transient
                self.gpu.busy(+1)
                self.gpu.progressed()
                link.send("ack", id=message.get("id"))
            elif op == "step" and not self.stuck:
                self.gpu.progressed()  # the previous collective completed
                self.steps.put(message.get("id"))
            elif op == "end" and message.get("fid") in transients:
                self.gpu.free(transients.pop(message.get("fid")))
                self.gpu.busy(-1)
            elif op == "ping" and not self.stuck:
                link.send("pong", id=message.get("id"))
            elif op == "shutdown":
                self.log("Shutdown requested by rank 0; exiting.")
                link.close()
                die(0)
            elif op == "abort":
                die(1, nccl_error(self.args.rank, message.get("reason", "group aborted")),
                    self.log)


class Head(Rank):
    """Rank 0: the rendezvous, the HTTP API and the drain."""

    def __init__(self, *a, model_info: dict | None = None, **k):
        super().__init__(*a, **k)
        self.model_info = model_info or {}
        self.ready = False
        self.draining = False
        self.group: HeadGroup | None = None
        self.server: Server | None = None
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max(1, self.args.max_running_requests))
        self._fids = iter(range(1, 1 << 62))
        self.inflight = 0  # accepted requests not yet finished (queued or running)
        self.running = 0
        self._stepping = threading.Condition(self._lock)  # running, stepped changed
        self.stepped = 0.0  # when the group's last collective completed (monotonic)
        self._step_now = False  # a forward began: step at once
        # vLLM counts tokens every engine step; SGLang when a request finishes
        self.metrics = {"prompt_tokens": 0, "generation_tokens": 0, "requests": 0,
                        "finished_stop": 0, "finished_length": 0, "last_tps": 0.0,
                        "finished_prompt_tokens": 0, "finished_generation_tokens": 0}
        self.latency = Latency(self.args.engine)  # TTFT and inter-token latency histograms

    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.stop.is_set():
            self.log(f"Received {name}; {'draining' if self.ready else 'shutting down'}.")
        self.stop.set()

    # Lifecycle

    def run(self) -> None:
        args = self.args
        self.group = HeadGroup(args.engine, args.nnodes, args.group_port,
                               on_failure=self._peer_failed, log=self.log)
        try:
            self.group.listen()
        except OSError as error:
            die(1, f"torch.distributed.DistNetworkError: The server socket has failed to "
                   f"listen on any local network address. port: {args.group_port}, "
                   f"useIpv6: 0, code: -98, name: EADDRINUSE, message: {error.strerror}",
                self.log)
        if args.http_port is not None:
            try:
                self.server = Server(args.http_host, args.http_port, self.routes,
                                     activate=args.engine == "sglang")
            except OSError as error:
                die(1, f"ERROR: [Errno {error.errno}] error while attempting to bind on "
                       f"address ({args.http_host!r}, {args.http_port}): {error.strerror}",
                    self.log)
            if args.engine == "sglang":
                self.server.serve_in_background()
        self.log(f"Init torch distributed begin. waiting for {args.nnodes - 1} ranks on port "
                 f"{args.group_port}")
        deadline = time.monotonic() + args.dist_timeout_s
        while not self.group.all_joined.wait(0.1):
            if self.stop.is_set():
                self._shutdown()
            if time.monotonic() > deadline:
                joined = len(self.group.links) + 1
                self.group.abort("rendezvous timed out")
                die(1, f"torch.distributed.DistStoreError: Timed out after "
                       f"{args.dist_timeout_s:g} seconds waiting for clients. "
                       f"{joined}/{args.nnodes} clients joined.", self.log)
        cut = transport.unreachable({0: self.endpoints, **self.group.endpoints})
        if cut is not None:  # every rank fails its connections: the group dies at init
            pid = os.getpid()
            print(f"{socket.gethostname()}:{pid}:{pid} [0] NCCL WARN {cut.warning}", flush=True)
            self.group.abort(cut.warning)
            die(1, f"[rank0]: {cut.error}", self.log)
        peers = {str(rank): [address for _, address in transport.rails(found)]
                 for rank, found in {0: self.endpoints, **self.group.endpoints}.items()}
        self.group.broadcast("joined", rails=peers)
        self.log("Init torch distributed ends.")
        self.init_nccl(peers)
        self.load()
        self.compile()
        while not self.group.all_loaded.wait(0.1):
            if self.stop.is_set():
                self._shutdown()
        self.ready = True
        threading.Thread(target=self._drive, name="steps", daemon=True).start()
        if args.engine == "vllm" and self.server is not None:
            self.server.server_activate()
            self.server.serve_in_background()
            self.log(f"Starting vLLM API server on http://{args.http_host}:{args.http_port}")
            self.log("Application startup complete.")
        else:
            self.log("The server is fired up and ready to roll!")
        while not self.stop.wait(0.2):
            pass
        self._drain()

    def _drain(self) -> None:
        with self._lock:
            self.draining = True
        limit = self.args.shutdown_timeout_s
        deadline = None if limit is None else time.monotonic() + limit
        said = -1
        while True:
            with self._lock:
                left = self.inflight
            if left == 0:
                break
            if deadline is not None and time.monotonic() > deadline:
                self.log(f"Shutdown timeout reached with {left} requests in flight; aborting "
                         "them.", "WARNING")
                break
            if left != said:
                self.log(f"Gracefully exiting... Remaining number of requests {left}")
                said = left
            time.sleep(0.05)
        self._shutdown()

    def _shutdown(self) -> None:
        """Tell the workers to exit, wait for them, exit 0."""
        self.group.shutdown()
        self.log("Shutdown complete.")
        die(0)

    def _peer_failed(self, rank: int, why: str) -> None:
        self.group.abort(why)
        die(1, nccl_error(0, f"{why} (peer rank {rank})"), self.log)

    def _watchdog(self, what: str, missing: set[int]) -> None:
        self.group.abort(f"watchdog timeout on rank 0 during {what}")
        ranks = ", ".join(str(rank) for rank in sorted(missing)) or "0"
        die(1, f"Watchdog timeout (self.watchdog_timeout={self.args.watchdog_timeout_s:g}): "
               f"{what} did not complete on rank(s) {ranks}", self.log)

    # A forward of the whole group

    def _drive(self) -> None:
        """The group's collectives while any forward runs, every STEP_S: rank 0's own ring
        writes, then every worker's answer (the engine's watchdog when one never comes)."""
        while True:
            with self._stepping:
                self._stepping.wait_for(lambda: self.running > 0)
            if self.stuck:
                return  # a hung host drives nothing
            self.step_writes()
            _, missing = self.group.ask("step", self.args.watchdog_timeout_s)
            if missing:
                self._watchdog("a decode step", missing)
            with self._stepping:
                self.stepped = time.monotonic()
                self._stepping.notify_all()
            self.gpu.progressed()
            with self._stepping:  # the next step: STEP_S on, or at once for a new forward
                self._stepping.wait_for(lambda: self._step_now, STEP_S)
                self._step_now = False

    def moving(self, since: float) -> None:
        """Wait until a collective of the group completed after since, recently: a token
        needs every rank."""
        with self._stepping:
            self._stepping.wait_for(lambda: self.stepped >= since and
                                    time.monotonic() - self.stepped <= STEP_FRESH_S)

    @contextmanager
    def forward(self, prompt_tokens: int):
        """Run one request through every rank: queue for a slot, take every rank's indexer
        scratch, hold the GPUs busy, prefill; release all of it at the end."""
        self._slots.acquire()
        with self._stepping:
            self.running += 1
            self._step_now = True
            self._stepping.notify_all()
        fid = next(self._fids)
        transient = None
        self.gpu.busy(+1)  # rank 0 runs its part, then waits in the collective for its peers
        try:
            began = time.monotonic()
            transient = self.scratch_begin(prompt_tokens)
            self.wedges(prompt_tokens)
            _, missing = self.group.ask("begin", self.args.watchdog_timeout_s, fid=fid,
                                        prompt_tokens=prompt_tokens)
            if self.stuck:
                missing = missing | {0}
                time.sleep(max(0.0, began + self.args.watchdog_timeout_s - time.monotonic()))
            if missing:
                self._watchdog(f"a {prompt_tokens}-token forward", missing)
            prefill = prompt_tokens / self.settings.prefill_tokens_per_s \
                if self.settings.prefill_tokens_per_s else 0.0
            time.sleep(prefill)
            yield
        finally:
            self.group.broadcast("end", fid=fid)
            self.gpu.free(transient)
            self.gpu.busy(-1)
            with self._lock:
                self.running -= 1
            self._slots.release()

    # HTTP

    def routes(self) -> dict:
        table = {("GET", "/health"): self.health, ("GET", "/v1/models"): self.models,
                 ("POST", "/v1/chat/completions"): self.chat,
                 ("POST", "/v1/completions"): self.completions}
        if self.args.engine == "vllm" or self.args.namespace.get("enable_metrics"):
            table[("GET", "/metrics")] = self.prometheus  # SGLang: only with --enable-metrics
        if self.args.engine == "sglang":
            table.update({("GET", "/health_generate"): self.health,
                          ("GET", "/model_info"): self.info_model,
                          ("GET", "/get_model_info"): self.info_model,
                          ("GET", "/server_info"): self.info_server,
                          ("GET", "/get_server_info"): self.info_server})
        else:
            table.update({("GET", "/version"): lambda body: Reply(
                200, {"version": VERSIONS["vllm"]}), ("GET", "/ping"): self.health})
        return table

    def health(self, body) -> Reply:
        if not self.ready or self.draining:
            return Reply(503)
        if self.args.engine == "sglang":  # a 1-token generation through every rank
            ok, _ = self.group.ask("ping", self.settings.health_timeout_s)
            with self._stepping:  # ... behind the running batch, whose collectives hang
                ok = ok and self._stepping.wait_for(
                    lambda: self.running == 0
                    or time.monotonic() - self.stepped <= STEP_FRESH_S,
                    self.settings.health_timeout_s)
            if not ok or self.stuck:
                return Reply(503)
        return Reply(200)

    def models(self, body) -> Reply:
        card = {"id": self.args.served_model_name, "object": "model",
                "created": int(time.time()), "owned_by": self.args.engine,
                "root": self.args.model_path, "parent": None,
                "max_model_len": self.args.context_length}
        return Reply(200, {"object": "list", "data": [card]})

    def info_model(self, body) -> Reply:
        return Reply(200, {"model_path": self.args.model_path,
                           "tokenizer_path": self.args.namespace.get("tokenizer_path")
                           or self.args.model_path, "is_generation": True,
                           "preferred_sampling_params": None, "weight_version": "default",
                           "has_image_understanding": False,
                           "has_audio_understanding": False,
                           "model_type": self.model_info.get("model_type"),
                           "architectures": self.model_info.get("architectures")})

    def info_server(self, body) -> Reply:
        return Reply(200, {**{k: v for k, v in self.args.namespace.items()},
                           "version": VERSIONS["sglang"],
                           "internal_states": [{
                               "avg_spec_accept_length": self.settings.accept_length,
                               "last_gen_throughput": self.metrics["last_tps"]}]})

    def prometheus(self, body) -> Reply:
        m, name = self.metrics, self.args.served_model_name
        label = f'{{model_name="{name}"}}'
        with self._lock:
            running, waiting = self.running, self.inflight - self.running
        accept = self.settings.accept_length
        if self.args.engine == "sglang":
            rows = [("spec_accept_length", "gauge", "Average speculative accept length.", accept),
                    ("num_running_reqs", "gauge", "Running requests.", running),
                    ("num_queue_reqs", "gauge", "Queued requests.", waiting),
                    ("gen_throughput", "gauge", "Generation throughput (token/s).", m["last_tps"]),
                    ("prompt_tokens_total", "counter", "Prefill tokens.",
                     m["finished_prompt_tokens"]),
                    ("generation_tokens_total", "counter", "Generated tokens.",
                     m["finished_generation_tokens"]),
                    ("num_requests_total", "counter", "Finished requests.", m["requests"])]
            lines = []
            for metric, kind, text, value in rows:
                lines += [f"# HELP sglang:{metric} {text}", f"# TYPE sglang:{metric} {kind}",
                          f"sglang:{metric}{label} {value}"]
        else:
            generated = m["generation_tokens"]
            drafts = round(generated / accept) if accept else 0
            steps = self.args.speculative_steps
            rows = [("num_requests_running", "gauge", running),
                    ("num_requests_waiting", "gauge", waiting),
                    ("prompt_tokens_total", "counter", m["prompt_tokens"]),
                    ("generation_tokens_total", "counter", generated),
                    ("spec_decode_num_drafts_total", "counter", drafts if steps else 0),
                    ("spec_decode_num_draft_tokens_total", "counter",
                     drafts * steps if steps else 0),
                    ("spec_decode_num_accepted_tokens_total", "counter",
                     generated - drafts if steps else 0)]
            lines = []
            for metric, kind, value in rows:
                lines += [f"# TYPE vllm:{metric} {kind}", f"vllm:{metric}{label} {value}"]
            for reason in ("stop", "length"):
                lines.append(f'vllm:request_success_total{{finished_reason="{reason}",'
                             f'model_name="{name}"}} {m["finished_" + reason]}')
        with self._lock:
            lines += self.latency.lines(name)
        return Reply(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4; charset=utf-8")

    def chat(self, body: dict) -> Reply | Stream:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) for m in messages):
            return Reply(400, error_body("'messages' must be a non-empty list of objects"))
        text = " ".join(_message_text(m.get("content")) for m in messages)
        return self._generate(body, count_tokens(text), chat=True, text=text)

    def completions(self, body: dict) -> Reply | Stream:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            tokens = len(prompt)  # token ids
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            tokens = count_tokens(prompt[0])
        elif isinstance(prompt, str):
            tokens = count_tokens(prompt)
        else:
            return Reply(400, error_body("'prompt' must be a string or a list of token ids"))
        text = prompt if isinstance(prompt, str) else prompt[0] if isinstance(
            prompt[0], str) else None
        return self._generate(body, tokens, chat=False, text=text)

    @property
    def context_window(self) -> int | None:
        """The context in tokens: the flag's, else the model's max_position_embeddings."""
        fallback = self.model_info.get("max_position_embeddings")
        return self.args.context_length or (fallback if isinstance(fallback, int) else None)

    def recall(self, text: str | None, prompt_tokens: int) -> list[str] | None:
        """The answer's words when text is the bench's needle prompt: the passphrase when the
        prompt is within reach (recall_tokens, else the context), else None (filler)."""
        found = NEEDLE.search(text) if text else None
        if found is None:
            return None
        reach = self.settings.recall_tokens or self.context_window
        if reach is not None and prompt_tokens > reach:
            self.log(f"needle prompt of {prompt_tokens} tokens is beyond the {reach} tokens "
                     "this stub recalls: answering filler")
            return None
        return [found.group(1)]

    def _generate(self, body: dict, prompt_tokens: int, chat: bool,
                  text: str | None = None) -> Reply | Stream:
        args = self.args
        if not self.ready or self.draining:
            return Reply(503, error_body("The server is not ready or is shutting down",
                                         "ServiceUnavailableError", 503))
        model = body.get("model")
        if args.engine == "vllm" and model not in (None, args.served_model_name):
            return Reply(404, error_body(f"The model `{model}` does not exist.",
                                         "NotFoundError", 404))
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            return Reply(400, error_body("max_tokens must be a non-negative integer"))
        window = self.context_window
        if window and prompt_tokens + (limit or 0) > window:
            return Reply(400, error_body(
                f"This model's maximum context length is {window} tokens. "
                f"However, you requested {prompt_tokens + (limit or 0)} tokens "
                f"({prompt_tokens} in the messages, {limit or 0} in the completion). Please "
                "reduce the length of the messages or completion."))
        answer = self.recall(text, prompt_tokens)
        natural = self.settings.answer_tokens if answer is None else len(answer)
        if limit is not None and (body.get("ignore_eos") or limit <= natural):
            count, reason = limit, "length"
        else:
            count, reason = natural, "stop"
        with self._lock:  # atomic with the drain's start: accepted requests are waited for
            if self.draining:
                return Reply(503, error_body("The server is shutting down",
                                             "ServiceUnavailableError", 503))
            self.inflight += 1
        stream = bool(body.get("stream"))
        usage_chunk = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        request = _Request(self, chat, prompt_tokens, count, reason,
                           model or args.served_model_name, answer)
        if stream:
            return Stream(request.sse(usage_chunk))
        return request.whole()

    def finished(self, prompt_tokens: int, generated: int, reason: str, seconds: float) -> None:
        with self._lock:
            self.inflight -= 1
            self.metrics["requests"] += 1
            self.metrics["finished_" + reason] += 1
            self.metrics["finished_prompt_tokens"] += prompt_tokens
            self.metrics["finished_generation_tokens"] += generated
            if seconds > 0 and generated > 1:
                self.metrics["last_tps"] = round((generated - 1) / seconds, 2)

    def count_prompt(self, tokens: int) -> None:
        with self._lock:
            self.metrics["prompt_tokens"] += tokens

    def count_token(self, seconds: float, first: bool) -> None:
        """One token, seconds after its request arrived (first) or after its last token."""
        with self._lock:
            self.metrics["generation_tokens"] += 1
            self.latency.token(seconds, first)


class _Request:
    """One completion request: its tokens, paced, as SSE events or a whole body."""

    def __init__(self, head: Head, chat: bool, prompt_tokens: int, count: int, reason: str,
                 model: str, answer: list[str] | None = None):
        self.head = head
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.count = count
        self.reason = reason
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.seed = prompt_tokens
        self.arrived = time.monotonic()  # TTFT counts the queue and the prefill, as engines do
        self.answer = answer or []  # the first words (the needle's passphrase), then filler
        self._settled = False
        self._generated = 0

    def _settle(self, seconds: float = 0.0) -> None:
        if not self._settled:
            self._settled = True
            self.head.finished(self.prompt_tokens, self._generated, self.reason, seconds)

    def tokens(self):
        """Yield each token text at the configured rate (first one right after prefill)."""
        head = self.head
        interval = 1.0 / head.settings.tokens_per_s if head.settings.tokens_per_s else 0.0
        first = began = time.monotonic()
        try:
            with head.forward(self.prompt_tokens):
                head.count_prompt(self.prompt_tokens)
                first = time.monotonic()
                for index in range(self.count):
                    pause = first + index * interval - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    head.moving(began)
                    self._generated += 1
                    now = time.monotonic()
                    head.count_token(now - (last if index else self.arrived), index == 0)
                    last = now
                    if index < len(self.answer):
                        yield self.answer[index] if index == 0 else " " + self.answer[index]
                    else:
                        yield token_text(index, self.seed)
        finally:
            self._settle(time.monotonic() - first)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self._generated,
                "total_tokens": self.prompt_tokens + self._generated}

    def _chunk(self, choices: list, usage: dict | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk" if self.chat
                else "text_completion", "created": self.created, "model": self.model,
                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return json.dumps(body)

    def sse(self, usage_chunk: bool):
        """The SSE payloads of a streamed answer; an iterator with close()."""
        return _Events(self._sse(usage_chunk), self._settle)

    def _sse(self, usage_chunk: bool):
        first = True
        for text in self.tokens():
            if self.chat:
                if first:
                    yield self._chunk([{"index": 0, "delta": {"role": "assistant",
                                                              "content": ""},
                                        "logprobs": None, "finish_reason": None}])
                yield self._chunk([{"index": 0, "delta": {"content": text}, "logprobs": None,
                                    "finish_reason": None}])
            else:
                yield self._chunk([{"index": 0, "text": text, "logprobs": None,
                                    "finish_reason": None}])
            first = False
        last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": self.reason} \
            if self.chat else {"index": 0, "text": "", "logprobs": None,
                               "finish_reason": self.reason}
        yield self._chunk([last])
        if usage_chunk:
            yield self._chunk([], self.usage())

    def whole(self) -> Reply:
        text = "".join(self.tokens())
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": self.reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": self.reason}
            kind = "text_completion"
        return Reply(200, {"id": self.id, "object": kind, "created": self.created,
                           "model": self.model, "choices": [choice], "usage": self.usage()})


class _Events:
    """An iterator over a generator whose close() also settles a request never started."""

    def __init__(self, generator, settle):
        self._generator = generator
        self._settle = settle
        self._started = False

    def __iter__(self):
        return self

    def __next__(self):
        self._started = True
        return next(self._generator)

    def close(self):
        self._generator.close()
        if not self._started:
            self._settle()


# --- Entry point ----------------------------------------------------------------------------

def _management_address() -> str:
    """What an engine without *_HOST_IP advertises on a Spark: the default route's address,
    the management network's (the node's name resolves to it; '' if it does not)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def _model_info(model_path: str, log: Log) -> dict:
    """The model directory's config.json; exit 1 as the engines do when there is none."""
    if not os.path.isdir(model_path):
        die(1, f"OSError: {model_path} is not a local folder and the model hub cannot be "
               "reached (no network on the rack): cannot load the model", log)
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        die(1, f"OSError: {model_path} does not appear to have a valid file named "
               f"config.json ({error})", log)
    return data if isinstance(data, dict) else {}


def _hub_login(repo: str, log: Log) -> None:
    """The lane fetches from gated repo: its Hugging Face token, read as huggingface_hub
    reads it, or exit 1 as the engine does (an unreadable file raises there too). The rack
    cannot reach the Hub, so a token found is taken as one the Hub accepts."""
    try:
        token = hubtoken.hub_token(os.environ)
    except OSError as error:
        die(1, f"{type(error).__name__}: {error}", log)
    if token is None:
        die(1, hubtoken.gated_error(repo), log)
    where = next((f"${name}" for name in hubtoken.ENV if os.environ.get(name, "").strip()),
                 hubtoken.token_path(os.environ))
    log(f"Hugging Face token for {repo} read from {where}")


def main(engine: str, argv: list[str] | None = None) -> None:
    """Run one rank of engine with argv (default: sys.argv[1:]); never returns."""
    started = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    record_start(engine, argv)
    try:
        args = cli.parse(engine, argv)
    except cli.ConfigError as error:
        die(1, f"ValueError: {error}")
    log = Log(engine, args.rank)
    model_info = _model_info(args.model_path, log)
    try:
        data = stubconfig.load(args.model_path)
        settings = stubconfig.resolve(data, engine, args.rank, argv, args.speculative_steps,
                                        VERSIONS[engine])
    except stubconfig.StubConfigError as error:
        die(1, f"sparkrack stub: bad {stubconfig.CONFIG_NAME}: {error}", log)
    if settings.exit_at_start:
        die(settings.exit_code, f"RuntimeError: rank {args.rank} failed at start (sparkrack "
                                "stub fault: exit_at_start)", log)
    if settings.gated_repo:
        _hub_login(settings.gated_repo, log)
    fraction = None
    if engine == "sglang":
        try:
            fraction = leak.budget_fraction(os.environ.get(leak.ENV))
        except ValueError as error:
            die(1, f"ValueError: {error}", log)
    name = f"sglang::scheduler_TP{args.rank}" if engine == "sglang" \
        else f"VLLM::Worker_TP{args.rank}"
    try:
        gpu = Gpu(name)
        total = gpu.total_bytes()
    except NoDevice as error:
        die(1, f"RuntimeError: No CUDA GPUs are available (gpusimd: {error})", log)
    scratch = None
    if fraction is not None:
        scratch = leak.IndexerScratch(
            fraction=fraction, chunk=args.chunked_prefill_size,
            cap=leak.budget_bytes(fraction, args.mem_fraction, total),
            scale=settings.indexer_scale)
        log(f"DSA indexer scratch budget {leak.ENV}={fraction:g}: "
            f"{'kept between requests (ratchets)' if scratch.ratchets else 'bounded'}, "
            f"block cap {scratch.cap / (1 << 20):.0f} MiB")
    try:
        interfaces = transport.local_interfaces()
        rdma = gpu.rdma()
        reach = transport.endpoints(os.environ, rdma, interfaces)
        fault = transport.check(os.environ, rdma, interfaces, args.head_host) or \
            (transport.advertised_fault(engine, os.environ, interfaces, _management_address())
             if args.nnodes > 1 else None)
    except NoDevice as error:
        die(1, f"RuntimeError: cannot read the node's RDMA devices (gpusimd: {error})", log)
    if fault is not None and fault.library == "gloo":  # init_process_group creates Gloo first
        log("Init torch distributed begin.")
        die(1, f"[rank{args.rank}]: {fault.error}", log)
    cls = Head if args.is_head else Worker
    extra = {"model_info": model_info} if args.is_head else {}
    rank = cls(args, settings, gpu, scratch, log, started, **extra)
    rank.transport_fault = fault
    rank.endpoints = reach
    if args.nnodes > 1 and (fault is None or fault.library == "advertise"):
        transport.echo_rails([address for _, address in transport.rails(reach)])
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: rank.on_signal(number))
    rank.check_die_after()
    rank.run()
    die(0)
