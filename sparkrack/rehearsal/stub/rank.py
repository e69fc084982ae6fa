"""What every rank has and does: its args, settings, GPU, indexer scratch and NCCL
communicator; its load and compile; its forwards' scratch and the wedge faults.
Rank 0 is head.py's Head, the others worker.py's Worker."""

from __future__ import annotations

import os
import threading
import time

from . import cli, compilecache, faults, leak
from .config import RankConfig
from .gpu import GiB, Gpu, OutOfMemory
from .log import Log, die
from .nccl import Communicator
from .record import VERSIONS

LOAD_STEPS = 8


class Rank:
    """One rank of the TP group, whatever its place in it."""

    def __init__(self, args: cli.EngineArgs, settings: RankConfig, gpu: Gpu,
                 scratch: leak.IndexerScratch | None, nccl: Communicator, log: Log):
        self.args = args
        self.settings = settings
        self.gpu = gpu
        self.scratch = scratch
        self.nccl = nccl
        self.log = log
        self.stop = threading.Event()  # SIGTERM / SIGINT received
        self.kept: list[int | None] = []  # allocations held for the process lifetime
        self.stuck = False  # an allocation failed mid-forward: this rank no longer answers
        self.forwards = 0  # forwards this rank has begun (the wedge_at_request fault)

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
        available = self.gpu.available_bytes()
        self.log(f"Load weight end. mem usage={size / GiB:.2f} GB, avail mem="
                 f"{available / GiB:.2f} GB, took {time.monotonic() - begin:.2f} s")
        if self.args.nnodes > 1:
            self.nccl.register(self.gpu.rdma(), (total - available) // 1024)

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

    def bind_error(self, error: OSError) -> None:
        """End the rank as uvicorn does when its HTTP port cannot be bound."""
        args = self.args
        die(1, f"ERROR: [Errno {error.errno}] error while attempting to bind on "
               f"address ({args.http_host!r}, {args.http_port}): {error.strerror}", self.log)

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
        """Count a forward; whether it wedges this rank (faults.wedges): its host hangs
        (answers nothing more, launches nothing: its GPU drains to idle) while its process
        lives on."""
        self.forwards += 1
        if self.stuck or not faults.wedges(self.settings, self.forwards, prompt_tokens):
            return self.stuck
        self.stuck = True
        self.gpu.hang()
        self.log(f"sparkrack stub fault: wedged in forward {self.forwards} "
                 f"({prompt_tokens}-token prompt)", "WARNING")
        return True
