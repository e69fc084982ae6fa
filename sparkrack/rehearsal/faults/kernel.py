"""Kernel faults of the rehearsal rack: the host kernel a node runs, its KHO behaviour and
command line (docs/rehearsal.md#faults). A mixin of RehearsalRack (rack.py): it uses the
rack's node()."""

from __future__ import annotations

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.rehearsal import nodefs, nodeproc


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
