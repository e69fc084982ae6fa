"""GPU faults of the rehearsal rack: a latched clock, a collective that hangs, heat, a
firmware power limit, a dropped clock lock, the burn load's start-up (docs/rehearsal.md#faults). A mixin of
RehearsalRack (rack.py): it uses the rack's node()."""

from __future__ import annotations

from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.rehearsal import nodeproc
from sparkrack.rehearsal.layout import NodeLayout

HEAT_FILE = "/var/lib/gpu-sim/heat"
POWER_LIMIT_FILE = "/var/lib/gpu-sim/power-limit"


class GpuFaults:
    """The node's simulated GB10: its clock latch, its heat, its power limit, its clock
    lock, its burn load."""

    def latch(self, name: str, on: bool = True) -> None:
        """Latch (or clear) the node's simulated GPU into the low-clock state."""
        node = self.node(name)
        argv = ["sh", "-c", "mkdir -p /var/lib/gpu-sim && touch /var/lib/gpu-sim/latched"] if on \
            else ["rm", "-f", "/var/lib/gpu-sim/latched"]
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change the latch: {done.stderr.strip()}")

    def nccl_hang(self, name: str, on: bool = True) -> None:
        """Make the node's NCCL hang its next collective, its kernel spinning until the
        process ends (or clear it; a reboot clears it too), as the pip-bundled NCCL build
        did on Sparks (vllm#42354): the rank's peers wait; on every node, every rank spins."""
        argv = ["sh", "-c", "mkdir -p /run/gpu-sim && touch /run/gpu-sim/collective-hang"] \
            if on else ["rm", "-f", "/run/gpu-sim/collective-hang"]
        done = nodeproc.in_node(self.node(name), argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change the collective hang: "
                                 f"{done.stderr.strip()}")

    def heat(self, name: str, degrees: float | None) -> None:
        """Add degrees C to the air around the node's GPU (a blocked vent, a hot room; None:
        clear). Kept on the node's disk until cleared, as a room stays hot across reboots."""
        self._disk_fault(name, HEAT_FILE, degrees, "the heat")

    def power_limit(self, name: str, watts: float | None) -> None:
        """Hold the node's GPU to watts, as a board's firmware power limit would (None:
        clear): its clock drops until the draw fits, nvidia-smi showing no limit, and its
        rank's steps, and so its group's, take longer. Kept on the node's disk until
        cleared, as firmware keeps it across reboots."""
        self._disk_fault(name, POWER_LIMIT_FILE, watts, "the power limit")

    def _disk_fault(self, name: str, path: str, value: float | None, what: str) -> None:
        """Write value to path on the node's disk (None: remove it), from this machine when
        the node is off."""
        node = self.node(name)
        argv = ["rm", "-f", path] if value is None else [
            "sh", "-c", 'mkdir -p "${2%/*}" && printf "%s\\n" "$1" > "$2"', "sh",
            f"{value:g}", path]
        if nodeproc.init_pid(node) is None:
            host = node.upper / path.lstrip("/")
            host.unlink(missing_ok=True)
            if value is not None:
                host.parent.mkdir(parents=True, exist_ok=True)
                host.write_text(f"{value:g}\n")
            return
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change {what}: {done.stderr.strip()}")

    def reset_clocks(self, name: str) -> None:
        """Drop the node's GPU clock lock as `nvidia-smi -rgc` does (what a driver reload, a
        GPU reset or an out-of-memory event leaves): the cap unit still reads active."""
        done = nodeproc.in_node(self.node(name), ["nvidia-smi", "-rgc"])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: nvidia-smi -rgc failed: "
                                 f"{done.stdout.strip() or done.stderr.strip()}")

    def load_startup(self, name: str, seconds: float | None) -> None:
        """Set how long the node's simulated burn load takes to start (None: the real
        load's 4.4 s). Kept across reboots; the test suite shortens it to save time."""
        node = self.node(name)
        path = "/etc/gpu-sim/load-startup"
        argv = ["rm", "-f", path] if seconds is None else \
            ["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "sh", f"{seconds:g}", path]
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the load start-up: "
                                 f"{done.stderr.strip()}")


def heat_c(node: NodeLayout, pid: int | None) -> float:
    """The node's heat fault in degrees C (0: none), read from this machine."""
    return _disk_value(node, pid, HEAT_FILE)


def power_limit_w(node: NodeLayout, pid: int | None) -> float:
    """The node's firmware power limit in watts (0: none), read from this machine."""
    return _disk_value(node, pid, POWER_LIMIT_FILE)


def _disk_value(node: NodeLayout, pid: int | None, path: str) -> float:
    where = node.upper / path.lstrip("/") if pid is None else Path(f"/proc/{pid}/root{path}")
    try:
        return float(where.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0
