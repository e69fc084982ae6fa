"""A rank >= 1: joins rank 0, loads, then follows the head's forwards and collectives
(group.py's messages) until rank 0 shuts the group down or the group dies."""

from __future__ import annotations

import os
import queue
import signal
import socket
import threading
import time

from .group import Link, connect_to_head, nccl_error
from .log import die
from .rank import Rank
from .server import Reply, Server


class Worker(Rank):
    """A rank >= 1: its place in the group, and its dummy /health (SGLang)."""

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
                  node=socket.gethostname(), pid=os.getpid(), endpoints=self.nccl.endpoints)
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
        self.nccl.init(message.get("rails") or {}, self.stop, message.get("mtus") or {})
        threading.Thread(target=self._follow, name="follow", daemon=True).start()
        threading.Thread(target=self._answer_steps, name="steps", daemon=True).start()
        self.load()
        self.compile()
        link.send("loaded")
        if args.engine == "sglang" and args.http_port is not None:
            try:
                Server(args.http_host, args.http_port, self._routes).serve_in_background()
            except OSError as error:
                self.bind_error(error)
            self.log(f"Dummy health check server started on {args.http_host}:"
                     f"{args.http_port}")
        self.log("Rank loaded; waiting for rank 0.")
        while True:
            time.sleep(3600)

    def _routes(self) -> dict:
        return {("GET", "/health"): lambda body: Reply(200)}

    def _answer_steps(self) -> None:
        """Join each of the head's collectives in order: the ring writes, then the answer
        (a write the fabric drops leaves the head, and so every rank, waiting); a collective
        this node's NCCL hangs is never answered: its kernel spins and its host reads no
        more of rank 0's broadcasts (the head hears it as `blocked`)."""
        while True:
            step = self.steps.get()
            if self.gpu.collective_hangs():
                self.stuck = True
                self.gpu.stuck_in_collective()
                self.log("sparkrack stub fault: this node's NCCL hangs the collective: its "
                         "kernel spins, the group waits", "WARNING")
                self.link.send("blocked")
                return
            self.nccl.step()
            if not self.stuck:  # with its GPU's pace: the group goes at its slowest rank's
                self.link.send("ack", id=step, pace=self.gpu.pace)

    def _head_lost(self, why: str) -> None:
        die(1, nccl_error(self.args.rank, f"{why} (peer rank 0 at {self.link.peer})"),
            self.log)

    def _follow(self) -> None:
        """Handle the head's messages until shutdown, abort or a dropped link."""
        link = self.link
        transients: dict[int, int | None] = {}
        prefilling: set[int] = set()
        while True:
            message = link.recv()
            if message is None:
                self._head_lost("rank 0 closed the connection")
            op = message.get("op")
            fid = message.get("fid")
            if op == "begin" and not self.stuck:
                prompt_tokens = int(message.get("prompt_tokens", 0))
                transient = self.scratch_begin(prompt_tokens)
                if self.stuck or self.wedges(prompt_tokens):
                    continue  # no ack: rank 0's forward waits until its watchdog
                transients[fid] = transient
                prefilling.add(fid)
                self.gpu.busy(+1)
                self.gpu.prefill(+1)
                self.gpu.progressed()
                link.send("ack", id=message.get("id"))
            elif op == "decoding" and fid in prefilling:
                prefilling.discard(fid)
                self.gpu.prefill(-1)
            elif op == "step" and not self.stuck:
                self.gpu.progressed()  # the previous collective completed
                self.steps.put(message.get("id"))
            elif op == "hold":
                self.gpu.host_wait()  # rank 0 broadcasts nothing more: wait for it
            elif op == "end" and fid in transients:
                if fid in prefilling:
                    prefilling.discard(fid)
                    self.gpu.prefill(-1)
                self.gpu.free(transients.pop(fid))
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
