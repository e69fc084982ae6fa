"""The rank's view of the node's simulated GB10 (gpusimd), like a CUDA context.

One connection per process: every allocation made through it and the load it holds end
when the process exits (the daemon releases what a closed connection held), so a killed
rank gives its memory back exactly as a real one does. Thread-safe.

Inside the image the client is the top-level module `gpusim_client` (copied from
sparkrack/rehearsal/sim); run from the source tree, that directory is put on sys.path.
"""

from __future__ import annotations

import os
import sys
import threading

try:
    import gpusim_client
except ImportError:  # run from the sparkrack tree, not the image
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "sim"))
    import gpusim_client

GiB = 1 << 30


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
        self._spinning = False

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
        """The node's RDMA devices as its driver shows them (see gpusim_rdma)."""
        with self._lock:
            try:
                return self._client.rdma()
            except gpusim_client.DaemonError as error:
                raise NoDevice(f"{error} (gpusimd predates the rdma op: restart the node)") from None
            except gpusim_client.DaemonUnreachable as error:
                raise NoDevice(str(error)) from None

    def busy(self, delta: int) -> None:
        """Count one forward in (+1) or out (-1); the GPU is at 100 % while any runs."""
        with self._lock:
            before = self._busy
            self._busy = max(0, self._busy + delta)
            if (before == 0) != (self._busy == 0) and not self._spinning:
                self._client.hold_load(100 if self._busy else 0)

    def spin(self) -> None:
        """Spin from now until the process ends: a kernel waiting on a flag its peers never
        set reads ~96 % busy at a fraction of the load power (a wedged rank)."""
        with self._lock:
            self._spinning = True
            self._client.hold_load(96, spin=True)
