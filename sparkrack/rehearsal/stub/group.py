"""The TP group over TCP: ranks >= 1 meet rank 0 at the dist-init / master address, a star
of JSON-line links standing for torch.distributed + NCCL; its messages:
docs/rehearsal.md#the-stub-engines.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

NCCL_VERSION = "2.27.7"
_HELLO_TIMEOUT_S = 10.0


def nccl_error(rank: int, detail: str) -> str:
    """The NCCL-like line a rank prints when the group dies under it."""
    return (f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: "
            f"/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process "
            f"exited or there was a network error, NCCL version {NCCL_VERSION}\n"
            f"ncclRemoteError: A call failed possibly due to a network error or a remote "
            f"process exiting prematurely. Last error: {detail}")


class Link:
    """One TCP connection carrying JSON lines; send is thread-safe."""

    def __init__(self, sock: socket.socket, peer: str):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self._reader = sock.makefile("rb")
        self._lock = threading.Lock()

    def send(self, op: str, **fields) -> bool:
        """Send one message; False if the link is gone."""
        data = json.dumps({"op": op, **fields}).encode() + b"\n"
        try:
            with self._lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def recv(self) -> dict | None:
        """The next message, or None once the peer closed (or the link broke)."""
        try:
            line = self._reader.readline()
        except (OSError, ValueError):
            return None
        if not line:
            return None
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return None
        return message if isinstance(message, dict) else None

    def close(self) -> None:
        for close in (self._reader.close, lambda: self.sock.shutdown(socket.SHUT_RDWR),
                      self.sock.close):
            try:
                close()
            except OSError:
                pass


class _Waiter:
    """Ranks whose answer to one message is still missing."""

    def __init__(self, ranks: set[int]):
        self.pending = set(ranks)
        self.done = threading.Event()
        if not self.pending:
            self.done.set()

    def answered(self, rank: int) -> None:
        self.pending.discard(rank)
        if not self.pending:
            self.done.set()


class HeadGroup:
    """Rank 0's side: the rendezvous listener and one link per worker."""

    def __init__(self, engine: str, nnodes: int, port: int,
                 on_failure: Callable[[int, str], None], log: Callable[[str], None],
                 on_blocked: Callable[[int], None] = lambda rank: None):
        self.engine = engine
        self.nnodes = nnodes
        self.port = port
        self.on_failure = on_failure  # (rank, why): a worker's link dropped
        self.on_blocked = on_blocked  # (rank): a worker's collective never completes
        self.log = log
        self.links: dict[int, Link] = {}
        self.nodes: dict[int, str] = {}
        self.paces: dict[int, float] = {}  # rank: its GPU's pace at its last step's answer
        self.endpoints: dict[int, dict] = {}  # what each rank's peers must reach (hello)
        self.loaded: set[int] = set()
        self.all_joined = threading.Event()
        self.all_loaded = threading.Event()
        self.closing = False  # shutdown or abort under way: closed links are expected
        self._lock = threading.Lock()
        self._waiters: dict[int, _Waiter] = {}
        self._ids = iter(range(1, 1 << 62))
        self._listener: socket.socket | None = None
        if nnodes == 1:
            self.all_joined.set()
            self.all_loaded.set()

    @property
    def workers(self) -> list[int]:
        return list(range(1, self.nnodes))

    def listen(self) -> None:
        """Bind the rendezvous port on every address (OSError if taken) and accept."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="rendezvous", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._greet, args=(sock, address[0]), daemon=True,
                             name=f"greet-{address[0]}").start()

    def _greet(self, sock: socket.socket, address: str) -> None:
        """Read a worker's hello and admit it, or reject it."""
        sock.settimeout(_HELLO_TIMEOUT_S)
        link = Link(sock, address)
        hello = link.recv()
        sock.settimeout(None)
        if not hello or hello.get("op") != "hello":
            link.close()
            return
        rank, why = hello.get("rank"), None
        with self._lock:
            if hello.get("engine") != self.engine:
                why = f"engine {hello.get('engine')!r} does not match rank 0's {self.engine!r}"
            elif hello.get("nnodes") != self.nnodes:
                why = f"nnodes {hello.get('nnodes')} does not match rank 0's {self.nnodes}"
            elif not isinstance(rank, int) or not 1 <= rank < self.nnodes:
                why = f"rank {rank!r} is out of range for {self.nnodes} nodes"
            elif rank in self.links:
                why = f"rank {rank} already joined from {self.nodes.get(rank)}"
            elif self.all_joined.is_set() or self.closing:
                why = "the group is already formed"
            else:
                self.links[rank] = link
                self.nodes[rank] = f"{hello.get('node', '?')} ({address})"
                endpoints = hello.get("endpoints")
                self.endpoints[rank] = endpoints if isinstance(endpoints, dict) else {}
                joined = len(self.links)
        if why:
            self.log(f"rejected a rank from {address}: {why}")
            link.send("reject", reason=why)
            link.close()
            return
        self.log(f"rank {rank} joined from {self.nodes[rank]} ({joined + 1}/{self.nnodes})")
        threading.Thread(target=self._read, args=(rank, link), daemon=True,
                         name=f"link-{rank}").start()
        if joined == self.nnodes - 1:
            self.all_joined.set()

    def _read(self, rank: int, link: Link) -> None:
        while True:
            message = link.recv()
            if message is None:
                break
            op = message.get("op")
            if op == "loaded":
                with self._lock:
                    self.loaded.add(rank)
                    if len(self.loaded) == self.nnodes - 1:
                        self.all_loaded.set()
            elif op in ("ack", "pong"):
                with self._lock:
                    waiter = self._waiters.get(message.get("id"))
                    if isinstance(message.get("pace"), (int, float)):
                        self.paces[rank] = min(1.0, max(0.05, float(message["pace"])))
                if waiter is not None:
                    waiter.answered(rank)
            elif op == "blocked":
                self.on_blocked(rank)
        with self._lock:
            expected = self.closing
            self.links.pop(rank, None)
        link.close()
        if not expected:
            self.on_failure(rank, f"rank {rank} on {self.nodes.get(rank, '?')} closed its "
                                  "connection")

    def broadcast(self, op: str, **fields) -> None:
        with self._lock:
            links = list(self.links.values())
        for link in links:
            link.send(op, **fields)

    def ask(self, op: str, timeout: float, **fields) -> tuple[bool, set[int]]:
        """Send op to every worker and wait for all answers: (all answered, missing ranks)."""
        with self._lock:
            message_id = next(self._ids)
            waiter = _Waiter(set(self.links))
            self._waiters[message_id] = waiter
            links = list(self.links.values())
        for link in links:
            link.send(op, id=message_id, **fields)
        done = waiter.done.wait(timeout)
        with self._lock:
            self._waiters.pop(message_id, None)
        return done, set(waiter.pending)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Tell every worker to exit and wait until their links close."""
        with self._lock:
            self.closing = True
            links = list(self.links.values())
        for link in links:
            link.send("shutdown")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self.links:
                    break
            time.sleep(0.02)
        self.stop_listening()

    def abort(self, reason: str) -> None:
        """Tell every worker the group is dead (they exit non-zero)."""
        with self._lock:
            self.closing = True
        self.broadcast("abort", reason=reason)
        self.stop_listening()

    def stop_listening(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass


def connect_to_head(host: str, port: int, deadline: float, stop: threading.Event,
                    log: Callable[[str], None]) -> socket.socket | None:
    """Connect to rank 0, retrying until deadline (monotonic); None on timeout or stop."""
    said = False
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            sock = socket.create_connection((host, port), timeout=min(2.0, left))
            sock.settimeout(None)  # a link waits as long as the group lives
            return sock
        except OSError as error:
            if not said:
                log(f"waiting for rank 0 at {host}:{port} ({error.strerror or error})")
                said = True
            stop.wait(min(0.25, max(0.0, deadline - time.monotonic())))
    return None
