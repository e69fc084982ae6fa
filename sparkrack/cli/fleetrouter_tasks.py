"""The `fleet.router` collection: the fleet's router (SMG) on its host.

`fleet.router.install` (docs/fleet.md#installing-the-router)."""

from sparkrack.cli.common import operator_task
from sparkrack.cli.flags import task
from sparkrack.cli.fleet_tasks import FLEET_HELP, fleet_from
from sparkrack.core import console

COLLECTION = "fleet.router"


@task(help={"fleet": FLEET_HELP})
@operator_task
def install(c, fleet=None):
    """Install the router as a systemd service on the fleet file's host.

    This machine downloads the pinned smg release for the host's machine and Python, sends
    it over SSH (the fleet file's key and known_hosts), installs it into a venv there, and
    (re)starts the service with the fleet file's port, metrics port and policy."""
    from sparkrack.racks.install import install_router

    install_router(fleet_from(fleet), on_event=console.say)
