"""Stub engines of the rehearsal rack: build their images, write their model directory."""

import json
from pathlib import Path

from invoke import task

from .. import console
from ..errors import UsageError
from .common import inventory_from, operator_task
from .rehearsal_tasks import DEFAULT_INVENTORY

HELP = {"inventory": f"rehearsal inventory (default: {DEFAULT_INVENTORY})"}


@task(help={**HELP, "force": "rebuild even if the inputs did not change",
            "json": "print JSON for scripts"})
@operator_task
def stub_images(c, inventory=None, force=False, json=False):
    """Build the stub engine images (deterministic docker-save tars).

    Into /var/lib/sparkrack/rehearsal/images; rebuilt only when their inputs change."""
    from ..rehearsal.stubimage import IMAGES_DIR, StubImageError, build_stub_images

    try:
        built = build_stub_images(inventory_from(inventory or DEFAULT_INVENTORY), force=force)
    except StubImageError as error:
        raise UsageError(str(error), fix="run on Debian with python3.11 installed") from None
    rows = [[engine, path.name, image_id, path.stat().st_size]
            for engine, (path, image_id) in built.items()]
    if json:
        console.print_json({engine: {"path": str(path), "image_id": image_id,
                                     "size": path.stat().st_size}
                            for engine, (path, image_id) in built.items()})
        return
    console.print_table(f"stub images in {IMAGES_DIR}", ["engine", "tar", "image id", "bytes"],
                        rows)


@task(help={**HELP, "config": "sparkrack-stub.json content: a JSON object or a file holding "
                              "one (default: none, the stub's defaults)",
            "nodes": "comma-separated node names (default: every node)"})
@operator_task
def stub_model(c, inventory=None, config=None, nodes=None):
    """Write the stub model directory on the rehearsal nodes.

    At the inventory's model_path: config.json, fake shards, manifest, sparkrack-stub.json."""
    from ..fleet import Fleet
    from ..rehearsal.stub.config import StubConfigError
    from ..rehearsal.stub.modeldir import write_stub_model

    rack = inventory_from(inventory or DEFAULT_INVENTORY)
    data = None
    if config:
        text = Path(config).read_text() if Path(config).is_file() else config
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"--config is not JSON: {error}",
                             fix='e.g. --config \'{"load_delay_s": 2}\'') from None
    with Fleet(rack, rack.select(nodes)) as fleet:
        try:
            write_stub_model(fleet, data)
        except StubConfigError as error:
            raise UsageError(str(error), fix="see sparkrack/rehearsal/stub/config.py") from None
        console.say(f"stub model written to {rack.vars.model_path} on "
                    f"{', '.join(n.name for n in fleet.nodes)}")
