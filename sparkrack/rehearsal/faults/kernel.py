"""Kernel faults of the rehearsal rack: the host kernel a node runs, its KHO behaviour and
command line, a host wedged by unified-memory exhaustion (docs/rehearsal.md#faults). A
mixin of RehearsalRack (rack.py): it uses the rack's node()."""

from __future__ import annotations

from pathlib import Path

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.rehearsal import nodefs, nodeproc
from sparkrack.rehearsal.layout import NodeLayout
from sparkrack.rehearsal.pdu import wedged_watts

WEDGED_FILE = "wedged"  # in the node's run folder on this machine: its wall draw, while wedged


class KernelFaults:
    """The node's host kernel."""

    def kernel(self, name: str, release: str | None, kho_bug: bool | None = None,
               cmdline: str = "") -> None:
        """The host kernel the node runs (None: DGX OS's): the release `uname -r` reports,
        whether KHO breaks its CMA (None: as public reports say of the release) and the
        parameters added to its command line, so the kernel rules can be rehearsed on an
        inventory node. Kept on its disk; a running node shows the new /proc/cmdline and
        CMA counters at once (its simulated driver reloads)."""
        node = self.node(name)
        try:
            script = nodefs.uname_script(release)
            data = nodefs.kernel_json(release, kho_bug, cmdline)
        except ValueError as error:
            raise UsageError(f"rehearsal.kernel: {error}",
                             fix="e.g. --release 6.17.0-1008-nvidia --cmdline kho=off") from None
        if nodeproc.init_pid(node) is None:
            nodefs.write_kernel(node, release, kho_bug, cmdline)
            return
        write = ('printf "%s" "$1" > "$2.new" && chmod 755 "$2.new" && mv "$2.new" "$2" && '
                 'printf "%s" "$3" > "$4.new" && mv "$4.new" "$4" && '
                 'systemctl reload nvidia-persistenced.service')
        done = nodeproc.in_node(node, ["sh", "-c", write, "sh", script.decode(),
                                       f"/{nodefs.UNAME_PATH}", data.decode(),
                                       f"/{nodefs.KERNEL_PATH}"])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the kernel: {done.stderr.strip()}")

    def wedge_host(self, name: str) -> None:
        """Wedge the node as unified-memory exhaustion does (open-gpu-kernel-modules#1358):
        every process of it stops where it is (the cgroup freezer: sshd, systemd, dockerd,
        the engine, the simulated GPU's daemon, so nvidia-smi hangs), no OOM kill, while its
        kernel still takes TCP connections (SSH connects, then never answers) and its PDU
        outlet draws the wedged figure (pdu.wedged_watts). Nothing inside can end it: only
        the power cut (rehearsal.poweroff, the PDU's outlet) does."""
        node = self.node(name)
        if nodeproc.init_pid(node) is None:
            raise SparkrackError(f"{name} is not running: nothing to wedge",
                                 fix=f"invoke rehearsal.poweron {name}")
        freeze = freezer(node)
        if freeze is None:
            raise SparkrackError(f"{name}: no cgroup v2 freezer under {node.cgroups()}",
                                 fix="the rehearsal needs cgroup v2 (the unified hierarchy)")
        (node.run / WEDGED_FILE).write_text(f"{wedged_watts(name):.1f}\n")
        freeze.write_text("1\n")


def freezer(node: NodeLayout) -> Path | None:
    """The node's cgroup.freeze (cgroup v2), or None."""
    return next((c / "cgroup.freeze" for c in node.cgroups() if (c / "cgroup.freeze").exists()),
                None)


def wedged_w(node: NodeLayout) -> float | None:
    """The node's wall draw while wedged (None: it is not wedged), read on this machine."""
    try:
        return float((node.run / WEDGED_FILE).read_text())
    except (OSError, ValueError):
        return None


def unwedge(node: NodeLayout) -> None:
    """Thaw the node's processes and forget its wedge: the power cut's first step, so that
    its SIGKILLs meet running processes."""
    freeze = freezer(node)
    if freeze is not None:
        try:
            freeze.write_text("0\n")
        except OSError:
            pass
    (node.run / WEDGED_FILE).unlink(missing_ok=True)
