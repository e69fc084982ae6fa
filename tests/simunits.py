"""What each simulated unit is (sparkrack/rehearsal/sim/gpusim/config.py's unit_figures),
for the tests that check what a node reports against its own figures: real units differ
(MemTotal, wall idle), and so do the rehearsal's, the same for a node name every time."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sparkrack" / "rehearsal" / "sim"))

from gpusim.config import UNIT_IDLE_W, UNIT_MEM_TOTAL_KB, unit_figures  # noqa: E402

__all__ = ["UNIT_IDLE_W", "UNIT_MEM_TOTAL_KB", "mem_total_kb", "unit_figures"]


def mem_total_kb(node: str) -> int:
    """The MemTotal (kB) the rehearsal node named so shows."""
    return unit_figures(node)["mem_total_kb"]
