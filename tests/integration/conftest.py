"""Fixtures of the rack tests beyond tests/conftest.py's rack and inventory."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from stubgroup import quick_burn
from stubload import load_stub_image

from sparkrack.engines import LABEL_ENGINE
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes, nodelimits
from sparkrack.rehearsal.stubimage import build_stub_images


@pytest.fixture(autouse=True)
def quick_gate_burn(gate_burn):
    """Every rack test's gates burn rackhealth.QUICK_BURN_S (stubgroup.quick_burn) through
    the one seam; a test that wants another burn sets its own with gate_burn."""
    gate_burn(quick_burn)


@pytest.fixture(scope="module")
def stub(inventory):
    """A fleet with both stub images on every node, and the nodes' docker limits. An engine
    left running (the README's first command starts one) is stopped in order first, as the
    lifecycle tests do: these tests create containers of the same names."""
    lanes.down(inventory)
    with Fleet(inventory) as fleet:
        busy = {node.name: [c.name for c in fleet.docker_client(node.name).containers.list(
            all=True, filters={"label": LABEL_ENGINE})] for node in fleet.nodes}
        assert not any(busy.values()), f"engine containers left on the rack: {busy}"
        images = build_stub_images(inventory)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda job: load_stub_image(fleet, job[0], *job[1]),
                          [(node.name, images[engine]) for node in fleet.nodes
                           for engine in images]))
        for node in fleet.nodes:  # the same image ID on every node
            client = fleet.docker_client(node.name)
            for engine, (_, image_id) in images.items():
                assert client.images.get(inventory.vars.images[engine]).id == image_id
        yield fleet, nodelimits.probe(fleet)
