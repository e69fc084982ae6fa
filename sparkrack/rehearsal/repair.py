"""The rehearsal rack put back to healthy, read from this machine rather than trusted.

`repair_faults` reads each node's state here (no SSH: cheap enough before every rack test
and after every chaos step) and undoes what a test, an operator or a chaos run left: a
node powered off, cut or isolated, a node hung (running but not answering SSH:
power-cycled), a node given a new host key, a node recabled, a latched, heated or
power-limited GPU, a collective hang, a renumbered GID table, an HCA port down, a switch set
otherwise than the inventory says, a load plugged into the PDU or its agent gone.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.rehearsal import pdu
from sparkrack.rehearsal.cabling import Cabling, read_cabling
from sparkrack.rehearsal.faults.kernel import wedged_w
from sparkrack.rehearsal.nodefs import read_json_object
from sparkrack.rehearsal.nodeproc import init_pid
from sparkrack.rehearsal.rack import RehearsalRack
from sparkrack.rehearsal.switch import Switch

DEFAULT_GID_INDEX = 3
HANG_GRACE_S = 30.0  # a running node silent on SSH this long is hung (a boot takes ~5 s)


def repair_faults(rack: RehearsalRack, hang_grace: float = HANG_GRACE_S, *,
                  extras: Collection[str] = ()) -> list[str]:
    """Undo the faults left on the rack's nodes (and on the extra nodes named in extras:
    those a run made members); what was repaired (empty: it was healthy). A running node
    silent on SSH for hang_grace seconds is hung: power-cycled."""
    repaired = []
    configured = Switch(rack.inventory.vars.rehearsal_switch_mtu)
    if rack.switch != configured:
        rack.set_switch(configured)
        repaired.append(f"switch back to {configured.describe()}")
    if pdu.read_loads():
        pdu.LOADS_FILE.unlink(missing_ok=True)
        repaired.append("loads unplugged from the PDU")
    if pdu.agent_pid() is None:
        pdu.start_agent(rack.inventory.path, rack.inventory.vars.pdu, lambda line: None)
        repaired.append("PDU agent started again")
    for state in rack.status():
        if state.extra and state.name not in extras:
            continue
        node = rack.node(state.name)
        if not state.running:
            rack.poweron(state.name)
            repaired.append(f"{state.name} powered on")
        elif not state.link_up:
            rack.heal(state.name)
            repaired.append(f"{state.name} link healed")
        elif state.isolated:
            rack.isolate(state.name, False)
            repaired.append(f"{state.name} reachable from this machine again")
        elif wedged_w(node) is not None:  # only a power cycle ends it
            rack.poweroff(state.name)
            rack.poweron(state.name)
            repaired.append(f"{state.name} power-cycled (its host wedged)")
        elif not state.ssh_open and _hung(rack, node, hang_grace):  # a hung boot or shutdown
            rack.poweroff(state.name)
            rack.poweron(state.name)
            repaired.append(f"{state.name} power-cycled (running, but sshd did not answer)")
        if read_cabling(node) != Cabling():
            rack.cable(state.name, Cabling())
            repaired.append(f"{state.name} recabled on port 0, both paths")
        if state.rekeyed:  # running by now
            rack.rekey(state.name, restore=True)
            repaired.append(f"{state.name} recorded host key back")
        if state.latched:
            rack.latch(state.name, on=False)
            repaired.append(f"{state.name} GPU latch cleared")
        if state.heat_c:
            rack.heat(state.name, None)
            repaired.append(f"{state.name} GPU heat cleared")
        if state.power_limit_w:
            rack.power_limit(state.name, None)
            repaired.append(f"{state.name} GPU power limit cleared")
        hardware = read_json_object(node.upper / "etc/gpu-sim/hardware.json")
        if (hardware.get("gid_index", DEFAULT_GID_INDEX) != DEFAULT_GID_INDEX
                or hardware.get("gid_moves")):
            rack.renumber_gid(state.name, None)
            repaired.append(f"{state.name} GID index back to {DEFAULT_GID_INDEX}")
        pid = init_pid(node)
        if pid and Path(f"/proc/{pid}/root/run/gpu-sim/collective-hang").exists():
            rack.nccl_hang(state.name, on=False)
            repaired.append(f"{state.name} NCCL collective hang cleared")
        down = read_json_object(Path(f"/proc/{pid}/root/run/gpu-sim/roce-faults.json")).get(
            "down", []) if pid else []
        for hca in down:
            rack.hca_down(state.name, hca, down=False)
            repaired.append(f"{state.name} {hca} port up")
    if repaired:
        rack.wait_booted([*rack.nodes, *(rack.node(n) for n in extras)])
    return repaired


def _hung(rack: RehearsalRack, node, grace: float) -> bool:
    """Whether a running node still does not answer SSH after grace seconds (a node a
    test just rebooted is given the time to finish booting)."""
    try:
        rack.wait_booted([node], timeout=grace)
    except SparkrackError:
        return True
    return False
