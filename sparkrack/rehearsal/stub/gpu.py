"""The rank's view of the node's simulated GB10 (gpusimd), like a CUDA context: one
connection per process, what it holds freed when the process ends, the load following what
the rank does (docs/rehearsal.md#the-stub-engines). Thread-safe. Inside the image the
client is the top-level package `gpusim` (copied from sparkrack/rehearsal/sim/gpusim);
run from the source tree, sim/ is put on sys.path.
"""

from __future__ import annotations

import os
import sys
import threading
import time

try:
    from gpusim import client as gpusim_client
except ImportError:  # run from the sparkrack tree, not the image
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "sim"))
    from gpusim import client as gpusim_client

GiB = 1 << 30
SPIN_AFTER_S = 1.0  # in a collective this long: the power averaged over a second is a spin's
WATCH_EVERY_S = 0.2


class OutOfMemory(Exception):
    """The driver refused an allocation (NV_ERR_NO_MEMORY)."""


class NoDevice(Exception):
    """No gpusimd answers: the rank has no GPU."""


class Gpu:
    """Allocations and load of one rank on its node's gpusimd."""

    def __init__(self, process_name: str):
        try:
            self._client = gpusim_client.GpuSimClient()
        except gpusim_client.DaemonUnreachable as error:
            raise NoDevice(str(error)) from None
        self._name = process_name
        self._lock = threading.Lock()
        self._busy = 0
        self._progress = time.monotonic()  # the last collective completed
        self._hung = False
        self._held: tuple[int, bool] = (0, False)  # what gpusimd holds for this rank
        threading.Thread(target=self._watch, name="gpu-watch", daemon=True).start()

    def total_bytes(self) -> int:
        """The unified pool's size (MemTotal)."""
        with self._lock:
            return self._client.state()["memory"]["total_kb"] * 1024

    def available_bytes(self) -> int:
        """MemAvailable of the node right now."""
        with self._lock:
            return self._client.state()["memory"]["available_kb"] * 1024

    def compute_cap(self) -> str:
        """The GPU's compute capability, as nvidia-smi's compute_cap says it ("12.1")."""
        with self._lock:
            return str(self._client.state().get("compute_cap") or "")

    def allocate(self, size: int) -> int | None:
        """Take size bytes until freed or the process ends; its id (None for size 0)."""
        if size <= 0:
            return None
        with self._lock:
            try:
                return self._client.allocate(int(size), name=self._name)
            except gpusim_client.DaemonError as error:
                raise OutOfMemory(str(error)) from None
            except gpusim_client.DaemonUnreachable as error:
                raise NoDevice(str(error)) from None

    def free(self, alloc_id: int | None) -> None:
        """Give one allocation back (None: nothing)."""
        if alloc_id is None:
            return
        with self._lock:
            self._client.free(alloc_id)

    def rdma(self) -> dict:
        """The node's RDMA devices as its driver shows them (see gpusim/rdma.py)."""
        with self._lock:
            try:
                return self._client.rdma()
            except gpusim_client.DaemonError as error:
                raise NoDevice(f"{error} (gpusimd predates the rdma op: restart the node)") from None
            except gpusim_client.DaemonUnreachable as error:
                raise NoDevice(str(error)) from None

    def busy(self, delta: int) -> None:
        """Count one forward in (+1) or out (-1); the GPU computes while any runs."""
        with self._lock:
            if delta > 0 and self._busy == 0:
                self._progress = time.monotonic()
            self._busy = max(0, self._busy + delta)
            self._hold()

    def progressed(self) -> None:
        """A collective of the group completed: the rank computes again."""
        with self._lock:
            self._progress = time.monotonic()
            self._hold()

    def hang(self) -> None:
        """The host hangs from now until the process ends: it launches no kernel more, so
        its queued work drains and the GPU goes idle."""
        with self._lock:
            self._hung = True
            self._hold()

    def _watch(self) -> None:
        """Turn a wait in a collective into a spin once it lasts SPIN_AFTER_S."""
        while True:
            time.sleep(WATCH_EVERY_S)
            with self._lock:
                self._hold()

    def _hold(self) -> None:
        """Tell gpusimd what this rank's GPU does now, when that changed (lock held)."""
        if self._hung or self._busy == 0:
            wanted = (0, False)
        elif time.monotonic() - self._progress > SPIN_AFTER_S:
            wanted = (96, True)
        else:
            wanted = (100, False)
        if wanted != self._held:
            try:
                self._client.hold_load(*wanted)
            except gpusim_client.DaemonUnreachable:
                return  # the driver went away: the next change tries again
            self._held = wanted
