"""Fabric faults of the rehearsal rack: its ConnectX-7 cabling, the switch, NVIDIA's CX7
netplan forms, GID renumbering, an HCA port down (docs/rehearsal.md#faults). A mixin of
RehearsalRack (rack.py): it uses the rack's node(), all_nodes, inventory, layout,
reboot() and _fabric_settled()."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.rehearsal import cx7netplan, hostnet, nodefs, nodeproc
from sparkrack.rehearsal.cabling import Cabling, read_cabling, write_cabling
from sparkrack.rehearsal.layout import HCAS, NodeLayout
from sparkrack.rehearsal.switch import Switch, read_switch, write_switch

LINK_RATES = "etc/gpu-sim/link-rates.json"  # read by roce-mount: each HCA's ports/1/rate


class FabricFaults:
    """The RoCE fabric: the node's cable, the switch, its HCAs' GID tables and ports."""

    def cable(self, name: str, cabling: Cabling) -> None:
        """Recable the node's ConnectX-7 (port, paths). Kept across reboots and power
        cycles, as a cable is; the node's driver sees it at once."""
        node = self.node(name)
        write_cabling(node, cabling.check())
        running = nodeproc.init_pid(node) is not None
        hostnet.ensure_node_net(node, cabling, self.switch, powered=running)
        if running:
            settled = self._fabric_settled(node, 15)
            if settled:
                raise SparkrackError(settled)
            done = nodeproc.in_node(node, [f"/{nodefs.SIM_LIB}/roce/roce-mount"])
            if done.returncode != 0:
                raise SparkrackError(f"{name}: the driver did not take the new cabling: "
                                     f"{done.stderr.strip() or done.stdout.strip()}")

    @property
    def switch(self) -> Switch:
        """The fabric switch: as `rehearsal.switch` left it, else as the inventory says."""
        return read_switch(self.inventory.vars.rehearsal_switch_mtu, self.layout.state_dir)

    def set_switch(self, switch: Switch) -> None:
        """Reconfigure the switch (kept across `down` and `up`, as a switch's config is):
        every port's MTU and pace at once, each running node's HCAs showing their link's
        rate (roce-mount re-run)."""
        write_switch(switch.check(), self.inventory.vars.rehearsal_switch_mtu,
                     self.layout.state_dir)
        if not hostnet.link_exists(self.layout.fabric_bridge):
            return  # the rack is down: `rehearsal.up` sets the switch up as recorded
        hostnet.ensure_fabric_bridge(switch, self.layout)
        for node in self.all_nodes:
            running = nodeproc.init_pid(node) is not None
            hostnet.ensure_node_net(node, read_cabling(node), switch, powered=running)
            if not running:
                nodefs.write_if_changed(node.upper / LINK_RATES, self._link_rates(node))
                continue
            done = nodeproc.in_node(node, [
                "sh", "-c", 'printf "%s" "$1" > "$2.new" && mv "$2.new" "$2" && "$3"', "sh",
                self._link_rates(node).decode(), f"/{LINK_RATES}",
                f"/{nodefs.SIM_LIB}/roce/roce-mount"])
            if done.returncode != 0:
                raise SparkrackError(f"{node.name}: the driver did not take the link rates: "
                                     f"{done.stderr.strip() or done.stdout.strip()}")

    def _link_rates(self, node: NodeLayout) -> bytes:
        """The node's /etc/gpu-sim/link-rates.json: what each HCA's ports/1/rate shows."""
        return (json.dumps(self.switch.node_rates(node.name), indent=1) + "\n").encode()

    def cx7_netplan(self, names: list[str], form: str) -> None:
        """Put NVIDIA's /etc/netplan/40-cx7.yaml on each node in one of its public forms
        (cx7netplan.FORMS; `none` removes it), then reboot them at once so that they boot
        with it."""
        nodes = [self.node(name) for name in names]
        for node in nodes:
            try:
                argv = cx7netplan.install_argv(form, node)
            except ValueError as error:
                raise UsageError(f"--cx7-netplan: {error}", fix="e.g. --cx7-netplan link-local") \
                    from None
            done = nodeproc.in_node(node, argv)
            if done.returncode != 0:
                raise SparkrackError(f"{node.name}: could not write /{cx7netplan.PATH}: "
                                     f"{done.stderr.strip()}")
        with ThreadPoolExecutor(len(nodes) or 1) as pool:
            list(pool.map(self.reboot, names))

    def renumber_gid(self, name: str, index: int | None) -> None:
        """Firmware renumbering of the node's GID tables: the IPv4-mapped RoCE v2 entry moves
        to index (None: back to 3), even or odd. Kept across reboots and power cycles, as
        firmware is."""
        if index is not None and index < 3:
            raise UsageError(f"GID index {index}: 0 and 1 hold the link-local pair and a "
                             "v1 entry comes before its v2", fix="give an index >= 3, e.g. 5")
        self._roce_fault(name, "renumber", "--clear" if index is None else str(index))

    def gid_moves(self, name: str, seed: int) -> None:
        """From the node's next boot on, each boot puts the RoCE v2 IPv4 entry at 3, 5 or 6,
        drawn from seed and the boot's number (as owners see it move across reboots);
        renumber_gid pins it again."""
        self._roce_fault(name, "moves", str(seed))

    def hca_down(self, name: str, hca: str, down: bool = True) -> None:
        """Take one HCA's port down (or up) until a reboot or power cycle: a cable out."""
        if hca not in HCAS:
            raise UsageError(f"unknown HCA {hca}", fix="the nodes have " + ", ".join(HCAS))
        self._roce_fault(name, "down" if down else "up", hca)

    def _roce_fault(self, name: str, *args: str) -> None:
        done = nodeproc.in_node(self.node(name), [f"/{nodefs.SIM_LIB}/roce/roce-fault", *args])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: roce-fault {' '.join(args)} failed: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")
