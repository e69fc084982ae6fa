"""The live state of one simulated GPU: lock, persistence, loads, allocations, latch, and
the booted kernel's view (command line, CMA counters: gpusim.kernel).

The clock lock and persistence mode live in STATE_DIR (a tmpfs in the node), so they
survive a daemon restart and vanish at reboot, like the driver's. Loads and allocations
belong to client connections and end with them; a load computes only while the client's
process runs (a stopped or frozen host feeds no kernels: its compute drains, the GPU reads
0 % and keeps its clock and a spin's draw; a kernel already spinning on a flag stays
resident). The latch, the heat and the collective hang are files the rack owns.
"""

import json
import os
import random
import threading

from gpusim.kernel import kernel_view, read_kernel
from gpusim.meminfo import meminfo_values, render_meminfo, write_in_place
from gpusim.peers import stopped
from gpusim.physics import KINDS, pace, readings

KIB = 1024
MIB = 1024 * 1024


class OutOfMemory(Exception):
    """An allocation larger than what the unified pool has available."""


class GpuState:
    """Thread-safe state of the simulated GPU; every change is applied at once."""

    def __init__(self, config: dict):
        self.config = config
        self._mutex = threading.Lock()
        self._loads: dict[int, tuple[int, str, int | None]] = {}  # client: (util %, kind, pid)
        self._allocations: dict[int, dict] = {}
        self._next_alloc_id = 1
        os.makedirs(config["state_dir"], exist_ok=True)
        self._lock_file = os.path.join(config["state_dir"], "clock-lock.json")
        self._persistence_file = os.path.join(config["state_dir"], "persistence-mode")
        self.meminfo_path = config["meminfo_file"]
        os.makedirs(os.path.dirname(self.meminfo_path), exist_ok=True)
        self.kernel: dict = {}
        self.reload_kernel()

    def reload_kernel(self) -> None:
        """Read the kernel the node boots again (at start, and on SIGHUP when the rack
        changed it) and show it: /proc/cmdline's file and the CMA lines of meminfo."""
        with self._mutex:
            self.kernel = kernel_view(read_kernel(self.config["kernel_file"]))
            write_in_place(self.config["cmdline_file"], self.kernel["cmdline"] + "\n")
            self._write_meminfo()

    def clock_lock(self) -> tuple[int, int] | None:
        """The (min, max) lock held by the driver, or None."""
        try:
            with open(self._lock_file, encoding="utf-8") as fh:
                low, high = json.load(fh)
        except FileNotFoundError:
            return None
        return low, high

    def set_clock_lock(self, low: int, high: int) -> None:
        """Lock the GPU clock range (the driver keeps it until reset or reboot)."""
        with self._mutex:
            _write_atomic(self._lock_file, json.dumps([low, high]))

    def reset_clock_lock(self) -> None:
        """Drop the clock lock."""
        with self._mutex:
            if os.path.exists(self._lock_file):
                os.remove(self._lock_file)

    def persistence_mode(self) -> bool:
        """Whether persistence mode is on (config default until set this boot)."""
        try:
            with open(self._persistence_file, encoding="utf-8") as fh:
                return fh.read().strip() == "1"
        except FileNotFoundError:
            return bool(self.config["persistence_mode"])

    def set_persistence_mode(self, enabled: bool) -> bool:
        """Set persistence mode; returns whether it changed."""
        with self._mutex:
            changed = self.persistence_mode() != enabled
            _write_atomic(self._persistence_file, "1" if enabled else "0")
            return changed

    def latched(self) -> bool:
        """Whether the board is in the low-clock state (the latch file exists)."""
        return os.path.exists(self.config["latch_file"])

    def heat(self) -> float:
        """Degrees C the rack adds to the air around the board (the heat file; 0: none)."""
        try:
            with open(self.config["heat_file"], encoding="utf-8") as fh:
                return float(fh.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def power_limit(self) -> float | None:
        """Watts the board's firmware holds the GPU to (the power-limit file; None: none)."""
        try:
            with open(self.config["power_limit_file"], encoding="utf-8") as fh:
                return float(fh.read().strip())
        except (OSError, ValueError):
            return None

    def pace(self) -> float:
        """How fast the GPU computes against its unlimited pace (physics.pace)."""
        return pace(self.config, self.clock_lock(), self.power_limit())

    def collective_hangs(self) -> bool:
        """Whether the node's NCCL hangs its next collective (the rack's file exists)."""
        return os.path.exists(self.config["collective_hang_file"])

    def hold_load(self, client: int, util: int, kind: str = "compute",
                  pid: int | None = None) -> None:
        """Keep `util` % utilization of this kind (physics.KINDS) for this client (0 releases
        it) while its process (pid, when known) runs."""
        if kind not in KINDS:
            raise ValueError(f"unknown load kind {kind!r}")
        with self._mutex:
            if util > 0 or kind == "drained":
                self._loads[client] = (util, kind, pid)
            else:
                self._loads.pop(client, None)

    def allocate(self, client: int, size: int, pid: int, name: str) -> int:
        """Take `size` bytes of unified memory for this client; returns the allocation id."""
        with self._mutex:
            available_kb = meminfo_values(self.config, self._allocated_kb())["MemAvailable"]
            if size > available_kb * KIB:
                raise OutOfMemory(f"requested {size} bytes, {available_kb * KIB} available")
            alloc_id = self._next_alloc_id
            self._next_alloc_id += 1
            self._allocations[alloc_id] = {
                "client": client, "bytes": size, "pid": pid, "name": name}
            self._write_meminfo()
            return alloc_id

    def free(self, client: int, alloc_id: int) -> bool:
        """Free one allocation of this client; returns whether it existed."""
        with self._mutex:
            entry = self._allocations.get(alloc_id)
            if entry is None or entry["client"] != client:
                return False
            del self._allocations[alloc_id]
            self._write_meminfo()
            return True

    def release_client(self, client: int) -> None:
        """Everything a client held ends with it, as when a process exits."""
        with self._mutex:
            self._loads.pop(client, None)
            owned = [key for key, entry in self._allocations.items() if entry["client"] == client]
            for key in owned:
                del self._allocations[key]
            if owned:
                self._write_meminfo()

    def snapshot(self) -> dict:
        """Everything a query can read right now (the lock only under 'sim')."""
        with self._mutex:
            util, kind = combined([(util, "drained" if kind != "spin" and stopped(pid)
                                    else kind) for util, kind, pid in self._loads.values()])
            allocations = list(self._allocations.values())
            allocated_kb = self._allocated_kb()
        lock, latched = self.clock_lock(), self.latched()
        config = self.config
        memory = meminfo_values(config, allocated_kb)
        return {
            **{key: config[key] for key in (
                "node", "name", "uuid", "serial", "pci_bus_id", "driver_version",
                "cuda_version", "compute_cap", "max_sm_mhz", "app_sm_mhz")},
            "index": config["gpu_index"],
            "persistence_mode": self.persistence_mode(),
            **readings(config, util, lock, latched, resident=bool(allocations),
                       phase=random.random(), kind=kind, heat=self.heat(),
                       swing=random.random(), limit_w=self.power_limit()),
            "thermal": {key: config[key] for key in (
                "tlimit_c", "slowdown_tlimit_c", "shutdown_tlimit_c")},
            "processes": _processes(allocations),
            "memory": {"total_kb": memory["MemTotal"], "available_kb": memory["MemAvailable"],
                       "allocated_kb": allocated_kb},
            "sim": {"lock": list(lock) if lock else None, "latched": latched,
                    "heat_c": self.heat(), "collective_hang": self.collective_hangs(),
                    "power_limit_w": self.power_limit(),
                    "load": kind if util > 0 or kind == "drained" else "idle"},
        }

    def _allocated_kb(self) -> int:
        return sum(entry["bytes"] for entry in self._allocations.values()) // KIB

    def _write_meminfo(self) -> None:
        cma = (self.kernel["cma_total_kb"], self.kernel["cma_free_kb"])
        write_in_place(self.meminfo_path,
                       render_meminfo(meminfo_values(self.config, self._allocated_kb(), cma)))


def combined(loads: list[tuple[int, str]]) -> tuple[int, str]:
    """What several loads on one GPU read as together (util, kind): real work (compute
    before decode) over a spinning kernel, a spin over a drained GPU, else idle."""
    work = [(util, kind) for util, kind in loads if kind in ("compute", "decode")]
    if work:
        kind = "compute" if any(kind == "compute" for _, kind in work) else "decode"
        return max(util for util, _ in work), kind
    spins = [util for util, kind in loads if kind == "spin"]
    if spins:
        return max(spins), "spin"
    return 0, "drained" if any(kind == "drained" for _, kind in loads) else "compute"


def _processes(allocations: list[dict]) -> list[dict]:
    """Allocations summed per process, as the process table shows them."""
    per_pid: dict[tuple, int] = {}
    for entry in allocations:
        key = (entry["pid"], entry["name"])
        per_pid[key] = per_pid.get(key, 0) + entry["bytes"]
    return [{"pid": pid, "name": name, "used_mib": size // MIB}
            for (pid, name), size in sorted(per_pid.items())]


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
