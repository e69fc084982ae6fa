"""Power faults of the rehearsal rack: a pulled cord, a boot, a clean reboot
(docs/rehearsal.md#faults). A mixin of RehearsalRack (rack.py): it uses the rack's node(),
switch, wait_booted() and _write_files()."""

from __future__ import annotations

import time

from sparkrack.core.errors import SparkrackError
from sparkrack.rehearsal import hostnet, hostprep, nodeproc
from sparkrack.rehearsal.cabling import read_cabling
from sparkrack.rehearsal.faults.kernel import unwedge

BOOT_TIMEOUT = 90.0  # a node's boot, from its init to sshd and the fabric settled


class PowerFaults:
    """The node's power: its cord pulled and put back, a clean reboot."""

    def poweroff(self, name: str) -> None:
        """Pull the node's power cord: every process dies at once, its ports go dark (no
        reply of any kind to its addresses, as from a real powered-off Spark); a latched
        GPU and a wedged host clear."""
        node = self.node(name)
        unwedge(node)
        nodeproc.power_cut(node)
        hostnet.unplug(node)
        node.latch_file.unlink(missing_ok=True)

    def poweron(self, name: str) -> None:
        """Boot a powered-off node and wait for it."""
        node = self.node(name)
        if nodeproc.init_pid(node) is None:
            nodeproc.power_cut(node)
            hostnet.ensure_node_net(node, read_cabling(node), self.switch)
            self._write_files(node, hostprep.client_key())
            nodeproc.launch(node)
        self.wait_booted([node])

    def reboot(self, name: str, wait: bool = True) -> None:
        """A clean `systemctl reboot` of the node; waits until it is back unless told not to."""
        node = self.node(name)
        before = len(nodeproc.boot_times(node))
        nodeproc.reboot(node)
        if not wait:
            return
        deadline = time.monotonic() + BOOT_TIMEOUT
        while len(nodeproc.boot_times(node)) == before:
            if time.monotonic() > deadline:
                raise SparkrackError(f"{name} did not reboot within {BOOT_TIMEOUT:.0f} s")
            time.sleep(0.1)
        time.sleep(0.5)  # let the old init go before waiting on the new one
        self.wait_booted([node])
