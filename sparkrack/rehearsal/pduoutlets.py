"""The rehearsal rack's nodes behind the PDU's outlets, as the PDU's agent (pduagent.py)
switches and meters them: an outlet switched off pulls its node's cord (the rack's power
faults, faults/power.py), one switched on boots it; an outlet draws what its node draws
(pdu.py reads the node's simulated GPU). docs/rehearsal.md#faults
"""

from __future__ import annotations

import time

from sparkrack.inventory import load_inventory
from sparkrack.inventory.pdu import PduConfig
from sparkrack.rehearsal import nodeproc
from sparkrack.rehearsal.faults.kernel import wedged_w
from sparkrack.rehearsal.layout import PDU_ADDR, NodeLayout
from sparkrack.rehearsal.pdu import (
    OUTLETS,
    READING_TTL_S,
    gpusim_state,
    idle_watts,
    read_loads,
)
from sparkrack.rehearsal.rack import RehearsalRack


class RackOutlets:
    """The rehearsal rack's nodes behind the PDU's outlets (pduagent.Outlets)."""

    def __init__(self, inventory_path: str, log=print):
        inventory = load_inventory(inventory_path)
        self.rack = RehearsalRack(inventory, say=log)
        pdu = inventory.vars.pdu or PduConfig("rehearsal-pdu", PDU_ADDR, ())
        self.name, self.count, self.model = pdu.name, OUTLETS, pdu.model
        self.nodes = {outlet: self.rack.node(node) for node, outlet in pdu.outlets
                      if outlet <= OUTLETS}
        self.off: set[int] = set()
        self._readings: dict[str, tuple[float, int]] = {}

    def label(self, outlet: int) -> str:
        node = self.nodes.get(outlet)
        return node.name if node else f"outlet {outlet}"

    def is_on(self, outlet: int) -> bool:
        node = self.nodes.get(outlet)
        if outlet in self.off and node is not None and nodeproc.init_pid(node) is not None:
            self.off.discard(outlet)  # booted by hand (rehearsal.poweron): switched on there
        return outlet not in self.off

    def watts(self, outlet: int) -> int:
        if outlet in self.off:
            return 0
        node = self.nodes.get(outlet)
        if node is None:
            return int(read_loads().get(str(outlet), 0))
        if nodeproc.init_pid(node) is None and not nodeproc.is_running(node):
            return 0  # its own cord pulled (rehearsal.poweroff), or not booted
        return self._node_watts(node)

    def switch(self, outlet: int, on: bool) -> None:
        node = self.nodes.get(outlet)
        if on:
            self.off.discard(outlet)
            if node is not None:
                self.rack.poweron(node.name)
        else:
            self.off.add(outlet)
            if node is not None:
                self.rack.poweroff(node.name)

    def _node_watts(self, node: NodeLayout) -> int:
        """The node's wall power now (cached READING_TTL_S), its idle figure when its
        simulated GPU does not answer yet, its wedged figure while its host is wedged."""
        wedged = wedged_w(node)
        if wedged is not None:
            return round(wedged)
        now = time.monotonic()
        cached = self._readings.get(node.name)
        if cached and now - cached[0] < READING_TTL_S:
            return cached[1]
        try:
            watts = round(gpusim_state(node.netns)["node_power_w"])
        except (OSError, ValueError, KeyError):
            watts = round(idle_watts(node.name))
        self._readings[node.name] = (now, watts)
        return watts
