"""The burn the gates run, owned here: its settings (`BurnSettings`, each length in its range
with the source of its figures) and `gate_burn`, the one function that `up`, `roll`, a
restore, a reboot's batches, a power cycle and the watchdog's restarts call: no caller
passes a burn down (docs/provisioning.md#the-burn-proving-the-cap).

    results = gateburn.gate_burn(inventory, nodes, fleet=fleet)   # SETTINGS.gate_seconds long

`gate_burn` is also the one seam of the tests: a test replaces it (tests/conftest.py's
`gate_burn` fixture), never a parameter of the callers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from sparkrack.core.errors import UsageError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.ranges import Range
from sparkrack.remote.capjudge import BUSY_SAMPLES, SAMPLE_SECONDS
from sparkrack.safety.burn import BurnResult, burn

BURN_SECONDS = Range(
    1, 600, "s", f"the sampler reads nvidia-smi every {SAMPLE_SECONDS:g} s and the judge wants "
    f"{BUSY_SAMPLES} readings with the GPU busy (remote/capjudge.py); the lock holds or not "
    "within seconds of load, so ten minutes prove no more than one",
    below="under 1 s of load the sampler cannot take two busy readings",
    over="a longer load proves nothing more and holds the rack lock meanwhile")


@dataclass(frozen=True)
class BurnSettings:
    """The gates' burn: how long its load runs (up, roll, restore, a reboot's batches, a
    power cycle, the watchdog's restarts): three readings of the sampler, one to spare,
    and the load runs again if it ended too soon (remote/capjudge.py's LOAD_RUNS). Its
    range, BURN_SECONDS, is `invoke burn --seconds`'s too."""

    gate_seconds: float = 1.5

    def __post_init__(self) -> None:
        for item in fields(self):
            problem = BURN_SECONDS.problem(getattr(self, item.name))
            if problem:
                raise UsageError(f"burn {item.name}: {problem}",
                                 fix=f"give {BURN_SECONDS.text()}")


SETTINGS = BurnSettings()


def gate_burn(inventory: Inventory, nodes: Iterable[Node],
              fleet: Fleet | None = None) -> list[BurnResult]:
    """The gates' fresh under-load check of nodes, all at once, SETTINGS.gate_seconds long;
    each verdict recorded on its node (safety/burn.py)."""
    return burn(inventory, nodes, seconds=SETTINGS.gate_seconds, fleet=fleet)
