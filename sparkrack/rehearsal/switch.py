"""The rehearsal's fabric switch: its ports' MTU and the rate each node's link negotiated.

A switch ships with every port at MTU 1500 (a MikroTik CRS804 port is 1500 until set);
an operator sets jumbo frames on every port, as the community does. The inventory's
`rehearsal_switch_mtu` says how the operator set it up (default 1500: as it ships);
`invoke rehearsal.switch` changes it, kept in a record beside the node disks (a switch
keeps its config across power cycles) until `--reset`. A link negotiates 200G, or 100G on
a 400G->4x100G breakout; the node's HCA shows it in ports/1/rate as mlx5 prints it. The
rehearsal paces each link at a thousandth of its rate (a veth on this machine is neither
200G nor steady; REHEARSAL_LINK_SCALE), so a measured rate scales back to the link's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.core.errors import UsageError
from sparkrack.inventory.model import REHEARSAL_LINK_SCALE
from sparkrack.rehearsal.layout import HCAS, STATE_DIR
from sparkrack.rehearsal.nodefs import write_if_changed

SWITCH_FILE = STATE_DIR / "switch.json"
SHIPPED_MTU = 1500
MAX_MTU = 9216  # a CRS804's largest L2 MTU, rounded to what hosts may use
FULL_RATE = 200  # Gbit/s: a Spark's ConnectX-7 port on a 200G switch port
# What mlx5 writes to ports/1/rate for an Ethernet link (drivers/infiniband/hw/mlx5/main.c,
# translate_eth_ext_proto_oper; the format is the core's rate_show): 200GAUI-2 is two
# 100G lanes (NDR); a 100G leg of a 400G QSFP56-DD breakout is two 50G lanes (HDR).
RATE_TEXT = {200: "200 Gb/sec (2X NDR)", 100: "100 Gb/sec (2X HDR)",
             50: "50 Gb/sec (1X HDR)", 25: "25 Gb/sec (1X EDR)"}
PACE_MBIT_PER_GBIT = 1000 / REHEARSAL_LINK_SCALE  # each link paced at 1/1000 of its rate


@dataclass(frozen=True)
class Switch:
    """The switch's port MTU and each link's negotiated rate ("node:hca" -> Gbit/s; a link
    not listed negotiated FULL_RATE)."""

    mtu: int = SHIPPED_MTU
    rates: Mapping[str, int] = field(default_factory=dict)

    def rate(self, node: str, hca: str) -> int:
        return self.rates.get(f"{node}:{hca}", FULL_RATE)

    def with_rate(self, port: str, gbit: int, nodes: list[str]) -> Switch:
        """This switch with port ("node:hca") negotiated at gbit; UsageError naming the flag
        for a port or rate that cannot be."""
        node, _, hca = port.partition(":")
        if node not in nodes or hca not in HCAS:
            raise UsageError(f"--port {port}: not a node's RoCE function",
                             fix=f"give NODE:HCA, e.g. --port {nodes[0]}:rocep1s0f0 (HCAs: "
                             f"{', '.join(HCAS)})")
        if gbit not in RATE_TEXT:
            raise UsageError(f"--rate {gbit}: not a rate a ConnectX-7 link negotiates here",
                             fix=f"give one of {', '.join(map(str, RATE_TEXT))} (Gbit/s)")
        rates = {k: v for k, v in self.rates.items() if k != port}
        if gbit != FULL_RATE:
            rates[port] = gbit
        return Switch(self.mtu, dict(sorted(rates.items())))

    def check(self) -> Switch:
        if not SHIPPED_MTU <= self.mtu <= MAX_MTU:
            raise UsageError(f"--mtu {self.mtu}: a switch port's MTU is {SHIPPED_MTU} to "
                             f"{MAX_MTU} here", fix="e.g. --mtu 9000 (jumbo) or --mtu 1500")
        return self

    def node_rates(self, node: str) -> dict[str, str]:
        """What each of node's HCAs shows in ports/1/rate."""
        return {hca: RATE_TEXT[self.rate(node, hca)] for hca in HCAS}

    def pace_mbit(self, node: str, hca: str) -> int:
        """The rehearsal's pace for that link, in Mbit/s."""
        return round(self.rate(node, hca) * PACE_MBIT_PER_GBIT)

    def describe(self) -> str:
        slow = ", ".join(f"{port} {gbit}G" for port, gbit in self.rates.items())
        return f"ports at MTU {self.mtu}, links at {FULL_RATE}G" + (f" but {slow}" if slow else "")


def read_switch(configured_mtu: int, state_dir: Path = STATE_DIR) -> Switch:
    """The switch as recorded by `rehearsal.switch` (in state_dir: the rack's); without a
    record, as the operator set it up (configured_mtu: the inventory's
    rehearsal_switch_mtu), every link at FULL_RATE."""
    try:
        data = json.loads((state_dir / SWITCH_FILE.name).read_text())
        return Switch(int(data["mtu"]), {str(k): int(v) for k, v in data["rates"].items()})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return Switch(configured_mtu)


def write_switch(switch: Switch, configured_mtu: int, state_dir: Path = STATE_DIR) -> None:
    """Record the switch in state_dir (the operator's setup as the inventory says leaves no
    record)."""
    file = state_dir / SWITCH_FILE.name
    if switch == Switch(configured_mtu):
        file.unlink(missing_ok=True)
        return
    write_if_changed(file, (json.dumps(
        {"mtu": switch.mtu, "rates": dict(switch.rates)}) + "\n").encode())
