"""Test-suite guards and the one rehearsal rack a test run boots.

SPARKRACK_SANDBOX=1 is set before any sparkrack module runs: under it the fleet layer
refuses every address outside loopback and the rehearsal subnet.
"""

import os

os.environ["SPARKRACK_SANDBOX"] = "1"
os.environ.pop("SPARKRACK_INVENTORY", None)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
REHEARSAL_INVENTORY = REPO / "inventory" / "rehearsal"


@pytest.fixture(scope="session")
def rack():
    """The rehearsal rack, booted once per test run; torn down at the end unless it was
    already up before the run (a developer's rack is left as it was found)."""
    from sparkrack.inventory import load_inventory
    from sparkrack.netguard import REHEARSAL_STATE_FILE
    from sparkrack.rehearsal.rack import RehearsalRack

    if os.geteuid() != 0:
        pytest.skip("the rehearsal rack needs root")
    was_up = REHEARSAL_STATE_FILE.exists()
    rack = RehearsalRack(load_inventory(REHEARSAL_INVENTORY), say=lambda msg: None)
    rack.up()
    yield rack
    if not was_up:
        rack.down()


@pytest.fixture(scope="session")
def inventory(rack):
    """The rehearsal inventory (with the rack up)."""
    return rack.inventory
