"""Rank 0: the rendezvous, readiness, the drain on SIGTERM, the engine's watchdog, and
the group's forwards, whose collectives it drives every STEP_S. Its HTTP API: api.py."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager

from . import fabric, transport
from .api import Api
from .group import HeadGroup, nccl_error
from .log import die
from .metrics import Metrics
from .nccl import warn
from .rank import Rank
from .server import Server
from .slots import FifoSlots

STEP_S = 0.25  # between the group's collectives while a forward runs
STEP_FRESH_S = 1.0  # a token waits for a collective completed this recently


class Head(Rank):
    """Rank 0 of the group."""

    def __init__(self, *a, model_info: dict | None = None, **k):
        super().__init__(*a, **k)
        self.model_info = model_info or {}
        self.ready = False
        self.draining = False
        self.group: HeadGroup | None = None
        self.server: Server | None = None
        self._lock = threading.Lock()
        self._slots = FifoSlots(max(1, self.args.max_running_requests))  # first come first
        self._fids = iter(range(1, 1 << 62))
        self.inflight = 0  # accepted requests not yet finished (queued or running)
        self.running = 0
        self._stepping = threading.Condition(self._lock)  # running, stepped changed
        self.stepped = 0.0  # when the group's last collective completed (monotonic)
        self.ring_gbit = fabric.PORT_GBIT  # the ring's pace (fabric.py), known at init
        self.in_step = False  # a collective of the group is under way
        self._step_now = False  # a forward began: step at once
        self.metrics = Metrics(self.args.engine, self.args.context_length or 131072)

    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.stop.is_set():
            if not self.ready:
                self.log(f"Received {name}; shutting down.")
            elif self.args.engine == "sglang":
                self.log(f"{name} received. Draining requests and shutting down...",
                         "WARNING")
            else:
                self.log("[shutdown] API server: shutdown triggered")
        self.stop.set()

    @property
    def refusing(self) -> bool:
        """Whether a new request is refused: vLLM's engine core refuses new work once its
        shutdown began; SGLang's tokenizer manager takes new requests while it drains (only
        its /health says 503)."""
        return self.draining and self.args.engine == "vllm"

    # Lifecycle

    def run(self) -> None:
        args = self.args
        self.group = HeadGroup(args.engine, args.nnodes, args.group_port,
                               on_failure=self._peer_failed, log=self.log,
                               on_blocked=self._peer_blocked)
        try:
            self.group.listen()
        except OSError as error:
            die(1, f"torch.distributed.DistNetworkError: The server socket has failed to "
                   f"listen on any local network address. port: {args.group_port}, "
                   f"useIpv6: 0, code: -98, name: EADDRINUSE, message: {error.strerror}",
                self.log)
        if args.http_port is not None and args.engine == "vllm":
            try:  # vLLM binds its port before the engine starts, and listens once ready
                self.server = Server(args.http_host, args.http_port, Api(self).routes,
                                     activate=False)
            except OSError as error:
                self.bind_error(error)
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
        found = {0: self.nccl.endpoints, **self.group.endpoints}
        cut = transport.unreachable(found)
        if cut is not None and cut.library == "gloo-hang":  # no error: the group waits
            self.log("Init torch distributed: connecting Gloo's full mesh")
            while time.monotonic() < deadline and not self.stop.wait(0.2):
                pass
            if self.stop.is_set():
                self._shutdown()
        if cut is not None:  # every rank fails its connections: the group dies at init
            warn(cut.warning)
            self.group.abort(cut.warning)
            die(1, f"[rank0]: {cut.error}", self.log)
        peers = {str(rank): [address for _, address in transport.rails(reach)]
                 for rank, reach in found.items()}
        self.ring_gbit = fabric.ring_gbit(found)  # the prefill's all-reduces: slowest hop
        mtus = {a: m for reach in found.values() for a, m in (reach.get("mtus") or {}).items()}
        self.group.broadcast("joined", rails=peers, mtus=mtus)
        self.log("Init torch distributed ends.")
        self.nccl.init(peers, self.stop, mtus)
        self.load()
        self.compile()
        while not self.group.all_loaded.wait(0.1):
            if self.stop.is_set():
                self._shutdown()
        threading.Thread(target=self._drive, name="steps", daemon=True).start()
        if args.engine == "vllm" and self.server is not None:
            self.ready = True
            self.server.server_activate()
            self.server.serve_in_background()
            self.log(f"Starting vLLM API server on http://{args.http_host}:{args.http_port}")
            self.log("Application startup complete.")
        else:
            self._serve_sglang()
        while not self.stop.wait(0.2):
            pass
        self._drain()

    def _serve_sglang(self) -> None:
        """SGLang's HTTP server starts only once its schedulers are ready (every rank
        loaded): its port is closed until then, a port taken fails the rank only now, and
        /health answers 503 until the warm-up request went through every rank."""
        args = self.args
        if args.http_port is not None:
            try:
                self.server = Server(args.http_host, args.http_port, Api(self).routes)
            except OSError as error:
                self.bind_error(error)
            self.server.serve_in_background()
            self.log(f"Uvicorn running on http://{args.http_host}:{args.http_port} "
                     "(Press CTRL+C to quit)")
        _, missing = self.group.ask("ping", self.args.watchdog_timeout_s)  # the warm-up
        if missing:
            self._watchdog("the warm-up request", missing)
        self.ready = True
        self.log("The server is fired up and ready to roll!")

    def _drain(self) -> None:
        """The engine's own drain on SIGTERM (docs/rehearsal.md#the-stub-engines): vLLM
        waits up to --shutdown-timeout for its in-flight requests (0, its default: aborts
        them at once); SGLang looks every drain_poll_s (5 s) whether any is left, with no
        limit, new ones included."""
        with self._lock:
            self.draining = True
            left = self.inflight
        if self.args.engine == "vllm":
            limit = self.args.shutdown_timeout_s or 0.0
            self.log(f"[shutdown] EngineCore: start mode={'drain' if limit else 'abort'} "
                     f"timeout={limit:g}s")
            if left and not limit:
                self.log(f"[shutdown] EngineCore: aborting in-flight requests count={left}")
            elif left:
                self.log(f"[shutdown] EngineCore: draining in-flight requests count={left} "
                         f"timeout={limit:g}s")
            deadline = time.monotonic() + limit
            while self._left() and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            poll = self.settings.drain_poll_s
            while True:
                left = self._left()
                self.log(f"Gracefully exiting... Remaining number of requests {left}.")
                if not left:
                    break
                time.sleep(poll)
        self._shutdown()

    def _left(self) -> int:
        with self._lock:
            return self.inflight

    def _shutdown(self) -> None:
        """Tell the workers to exit, wait for them, exit 0."""
        self.group.shutdown()
        self.log("Shutdown complete.")
        die(0)

    def _peer_failed(self, rank: int, why: str) -> None:
        self.group.abort(why)
        die(1, nccl_error(0, f"{why} (peer rank {rank})"), self.log)

    def _peer_blocked(self, rank: int) -> None:
        """A rank's collective never completes and its host reads no more of rank 0's
        broadcasts: rank 0 blocks before launching the next one, and every other rank waits
        for it on its host (vllm#42354: rank 0 blocked in the ncclAllReduce call while the
        wedged rank spun); their GPUs drain."""
        self.gpu.host_wait()
        self.group.broadcast("hold", rank=rank)

    def _watchdog(self, what: str, missing: set[int]) -> None:
        self.group.abort(f"watchdog timeout on rank 0 during {what}")
        ranks = ", ".join(str(rank) for rank in sorted(missing)) or "0"
        die(1, f"Watchdog timeout (self.watchdog_timeout={self.args.watchdog_timeout_s:g}): "
               f"{what} did not complete on rank(s) {ranks}", self.log)

    # Requests

    def accept(self) -> bool:
        """Count a request in, unless the drain refuses it (atomic with the drain's start:
        accepted requests are waited for)."""
        with self._lock:
            if self.refusing:
                return False
            self.inflight += 1
            return True

    def finished(self, prompt_tokens: int, generated: int, reason: str, seconds: float) -> None:
        with self._lock:
            self.inflight -= 1
        self.metrics.finished(prompt_tokens, generated, reason, seconds)

    def requests(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        with self._lock:
            return self.running, self.inflight - self.running

    def serving(self, timeout: float) -> bool:
        """Whether a 1-token generation through every rank completes within timeout, behind
        the running batch (whose collectives hang when a rank does)."""
        ok, _ = self.group.ask("ping", timeout)
        with self._stepping:
            ok = ok and self._stepping.wait_for(
                lambda: self.running == 0 or time.monotonic() - self.stepped <= STEP_FRESH_S,
                timeout)
        return ok and not self.stuck

    # A forward of the whole group

    def _drive(self) -> None:
        """The group's collectives while any forward runs, every STEP_S: rank 0's own ring
        writes, then every worker's answer (the engine's watchdog when one never comes)."""
        while True:
            with self._stepping:
                self._stepping.wait_for(lambda: self.running > 0)
            if self.stuck:
                return  # a hung host drives nothing
            with self._stepping:
                self.in_step = True
            if self.gpu.collective_hangs():
                self._stuck_in_collective()
            self.nccl.step()
            _, missing = self.group.ask("step", self.args.watchdog_timeout_s)
            if missing:
                self._watchdog("a decode step", missing)
            with self._stepping:
                self.stepped = time.monotonic()
                self.in_step = False
                self._stepping.notify_all()
            self.gpu.progressed()
            with self._stepping:  # the next step: STEP_S on, or at once for a new forward
                self._stepping.wait_for(lambda: self._step_now, STEP_S)
                self._step_now = False

    def _stuck_in_collective(self) -> None:
        """This node's NCCL hangs the collective (the rehearsal's fault): the workers enter
        it too, rank 0's kernel spins and its host launches nothing more; the ranks whose
        own collective completes wait for rank 0's next broadcast on their hosts. Until
        the engine's watchdog, as NCCL's own would end it."""
        self.stuck = True
        self.log("sparkrack stub fault: this node's NCCL hangs the collective: its kernel "
                 "spins, the group waits", "WARNING")
        self.group.broadcast("step", id=0)  # an answer nobody waits for
        self.gpu.stuck_in_collective()
        self.group.broadcast("hold", rank=0)
        time.sleep(self.args.watchdog_timeout_s)
        self._watchdog("a decode step", {0})

    def pace(self) -> float:
        """How fast the group computes against its unlimited pace: its slowest rank's GPU
        (a firmware power limit on one node slows every rank's steps: TP waits for it)."""
        paces = list(self.group.paces.values()) if self.group is not None else []
        return min([self.gpu.pace, *paces])

    def moving(self, since: float) -> None:
        """Wait until a collective of the group completed after since, recently: a token
        needs every rank."""
        with self._stepping:
            self._stepping.wait_for(lambda: self.stepped >= since and
                                    time.monotonic() - self.stepped <= STEP_FRESH_S)

    @contextmanager
    def forward(self, prompt_tokens: int):
        """Run one request through every rank: queue for a slot, take every rank's indexer
        scratch, hold the GPUs busy, prefill chunk by chunk; release all of it at the end."""
        self._slots.acquire()
        with self._stepping:  # it joins the batch between steps: never while one hangs
            self._stepping.wait_for(lambda: not self.in_step)
            self.running += 1
            self._step_now = True
            self._stepping.notify_all()
        fid = next(self._fids)
        transient = None
        cached = [0]  # this forward's tokens in the KV cache
        self.gpu.busy(+1)  # rank 0 runs its part, then waits in the collective for its peers
        self.gpu.prefill(+1)
        prefilling = True
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
            prefill_began = time.monotonic()
            self._prefill(prompt_tokens, cached)
            self.metrics.prefilled(time.monotonic() - prefill_began)
            self.gpu.prefill(-1)
            prefilling = False
            self.group.broadcast("decoding", fid=fid)
            yield
        finally:
            if prefilling:
                self.gpu.prefill(-1)
            self.group.broadcast("end", fid=fid)
            self.metrics.cached(-cached[0])
            self.gpu.free(transient)
            self.gpu.busy(-1)
            with self._lock:
                self.running -= 1
            self._slots.release()

    def _prefill(self, prompt_tokens: int, cached: list[int]) -> None:
        """The prompt in chunks of the chunked-prefill size, each an engine step whose
        collectives must complete; after each, the KV cache holds its tokens (the gauges
        the engines set at every step: vLLM's kv_cache_usage_perc, SGLang's
        num_used_tokens), so a long prefill shows progress chunk by chunk. Each chunk's
        all-reduces go at the ring's slowest hop (fabric.prefill_s)."""
        left = prompt_tokens
        while left > 0:
            size = min(max(1, self.args.chunked_prefill_size), left)
            chunk_began = time.monotonic()
            time.sleep(fabric.prefill_s(size, self.settings.prefill_tokens_per_s,
                                        self.ring_gbit) / self.pace())
            self.moving(chunk_began)
            self.metrics.cached(size)
            cached[0] += size
            left -= size
