"""How a rehearsal node's ConnectX-7 is cabled: which port, one or both PCIe paths.

A Spark's two QSFP ports are each reached over two PCIe x4 paths, so a port shows up as two
RoCE functions (`rocep1s0f0` and `roceP2p1s0f0` for port 0). A cable in a port brings both
of its functions up; a cable that is not an approved QSFP112 brings up only one path (about
100 Gbit/s); a link can also train far below its rate (a rate limit on the node's rails). The record lives beside the node's disk, not on it: a cable outlives reboots,
power cycles and reinstalls. The default is the field report's rack: port 0, both paths.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from sparkrack.core.errors import UsageError
from sparkrack.rehearsal.layout import FUNCTIONS, NodeLayout
from sparkrack.rehearsal.nodefs import write_if_changed

PATHS = ("both", "one", "none")


@dataclass(frozen=True)
class Cabling:
    """One node's cable: the port it sits in and how many of its paths came up."""

    port: int = 0
    paths: str = "both"  # both | one (path a only) | none (no cable)
    rate_mbit: int | None = None  # a rail limited to this rate (a link trained low)

    def check(self) -> Cabling:
        """UsageError naming the flag when the cabling cannot exist."""
        if self.port not in (0, 1):
            raise UsageError(f"--port {self.port}: a Spark's ConnectX-7 has ports 0 and 1",
                             fix="give --port 0 or --port 1")
        if self.paths not in PATHS:
            raise UsageError(f"--paths {self.paths!r} is not one of {', '.join(PATHS)}",
                             fix="both: an approved QSFP112 cable; one: a cable that trains "
                             "one PCIe path only; none: no cable")
        if self.rate_mbit is not None and self.rate_mbit < 1:
            raise UsageError(f"--rate {self.rate_mbit}: not a rate in Mbit/s",
                             fix="give a positive number of Mbit/s, e.g. --rate 500")
        return self

    def up(self, port: int, path: str) -> bool:
        """Whether the function (port, path) has a link."""
        if self.paths == "none" or port != self.port:
            return False
        return path == "a" or self.paths == "both"

    def functions_up(self) -> list[str]:
        """The HCAs with a link, in `ibdev2netdev` order."""
        return sorted(hca for key, (hca, _) in FUNCTIONS.items() if self.up(*key))

    def describe(self) -> str:
        if self.paths == "none":
            return "no cable"
        rate = f", {self.rate_mbit} Mbit/s" if self.rate_mbit else ""
        return f"port {self.port}, {'both paths' if self.paths == 'both' else 'one path'}{rate}"


def read_cabling(node: NodeLayout) -> Cabling:
    """The node's cabling on record (the default when none is)."""
    try:
        data = json.loads(node.cabling_file.read_text())
        rate = data.get("rate_mbit")
        return Cabling(int(data.get("port", 0)), str(data.get("paths", "both")),
                       int(rate) if rate else None)
    except (OSError, ValueError, TypeError, AttributeError):
        return Cabling()


def write_cabling(node: NodeLayout, cabling: Cabling) -> None:
    """Record the node's cabling (the default leaves no file)."""
    if cabling == Cabling():
        node.cabling_file.unlink(missing_ok=True)
        return
    write_if_changed(node.cabling_file, (json.dumps(asdict(cabling)) + "\n").encode())
