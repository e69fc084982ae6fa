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
# Waiting in a collective this long reads as a spin: past nvidia-smi's ~1 s power average
# and past the 1 s a token counts a collective as fresh (head.STEP_FRESH_S), so a rank the
# group waits on spins, while one whose steps only come late on a busy machine does not.
SPIN_AFTER_S = 2.0
WATCH_EVERY_S = 0.2
SPIN_UTIL = 96  # a kernel polling a flag (vllm#42354's wedged rank)


class OutOfMemory(Exception):
    """The driver refused an allocation (NV_ERR_NO_MEMORY)."""


class NoDevice(Exception):
    """No gpusimd answers: the rank has no GPU."""


class Gpu:
    """Allocations and load of one rank on its node's gpusimd. While a forward runs the
    GPU prefills (compute) or decodes; a wait in a collective longer than SPIN_AFTER_S
    spins; a host that hangs or waits before launching leaves it drained; a collective
    whose kernel never completes spins until the process ends."""

    def __init__(self, process_name: str):
        try:
            self._client = gpusim_client.GpuSimClient()
        except gpusim_client.DaemonUnreachable as error:
            raise NoDevice(str(error)) from None
        self._name = process_name
        self._lock = threading.Lock()
        self._busy = 0  # forwards running
        self._prefilling = 0  # ... of which in their prefill
        self._progress = time.monotonic()  # the last collective completed
        self._hung = False  # the host launches nothing more
        self._host_wait = False  # the host waits before launching (until progress)
        self._stuck_kernel = False  # a collective whose kernel never completes
        self._held: tuple[int, str] = (0, "compute")  # what gpusimd holds for this rank
        self.pace = 1.0  # how fast it computes against its unlimited pace, at the last step
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

    def ports(self) -> dict:
        """The state of each of the node's HCA ports, what NCCL's async thread watches."""
        with self._lock:
            try:
                return self._client.ports()
            except gpusim_client.DaemonError as error:
                raise NoDevice(f"{error} (gpusimd predates the ports op: restart the "
                               "node)") from None
            except gpusim_client.DaemonUnreachable as error:
                raise NoDevice(str(error)) from None

    def open_rails(self, addresses: list[str]) -> list[str]:
        """This rank's queue pairs on its rails: the node's HCAs answer its peers' RDMA
        writes to addresses while the process lives, stopped or frozen or not
        (gpusim/hca.py); the addresses answered."""
        if not addresses:
            return []
        with self._lock:
            try:
                return self._client.open_rails(addresses)
            except gpusim_client.DaemonError as error:
                raise NoDevice(f"{error} (gpusimd predates the rails op: restart the "
                               "node)") from None
            except gpusim_client.DaemonUnreachable as error:
                raise NoDevice(str(error)) from None

    def collective_hangs(self) -> bool:
        """Whether the node's NCCL hangs this collective (the rehearsal's fault); reads the
        GPU's pace with it (self.pace)."""
        with self._lock:
            try:
                found = self._client.collective()
            except (gpusim_client.DaemonError, gpusim_client.DaemonUnreachable):
                return False
            self.pace = min(1.0, max(0.05, float(found.get("pace", 1.0))))
            return bool(found["hang"])

    def busy(self, delta: int) -> None:
        """Count one forward in (+1) or out (-1); the GPU works while any runs."""
        with self._lock:
            if delta > 0 and self._busy == 0:
                self._progress = time.monotonic()
            self._busy = max(0, self._busy + delta)
            self._hold()

    def prefill(self, delta: int) -> None:
        """Count one forward's prefill in (+1) or out (-1): it computes at full power;
        the others decode."""
        with self._lock:
            self._prefilling = max(0, self._prefilling + delta)
            self._hold()

    def progressed(self) -> None:
        """A collective of the group completed: the rank computes again."""
        with self._lock:
            self._progress = time.monotonic()
            self._host_wait = False
            self._hold()

    def hang(self) -> None:
        """The host hangs from now until the process ends: it launches no kernel more, so
        its queued work drains and the GPU reads 0 %, its clock held."""
        with self._lock:
            self._hung = True
            self._hold()

    def host_wait(self) -> None:
        """The host blocks before launching the next kernel (until a collective completes
        again): the GPU drains."""
        with self._lock:
            self._host_wait = True
            self._hold()

    def stuck_in_collective(self) -> None:
        """This collective's kernel never completes: the GPU spins until the process ends."""
        with self._lock:
            self._stuck_kernel = True
            self._hold()

    def _watch(self) -> None:
        """Turn a wait in a collective into a spin once it lasts SPIN_AFTER_S."""
        while True:
            time.sleep(WATCH_EVERY_S)
            with self._lock:
                self._hold()

    def _wanted(self) -> tuple[int, str]:
        if self._stuck_kernel:
            return SPIN_UTIL, "spin"
        if self._busy == 0 and not self._hung:
            return 0, "compute"
        if self._hung or self._host_wait:
            return 0, "drained"
        if time.monotonic() - self._progress > SPIN_AFTER_S:
            return SPIN_UTIL, "spin"
        return 100, "compute" if self._prefilling else "decode"

    def _hold(self) -> None:
        """Tell gpusimd what this rank's GPU does now, when that changed (lock held)."""
        wanted = self._wanted()
        if wanted != self._held:
            try:
                self._client.hold_load(wanted[0], kind=wanted[1])
            except gpusim_client.DaemonUnreachable:
                return  # the driver went away: the next change tries again
            self._held = wanted
