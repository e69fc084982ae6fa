"""The fleet's docker client on a rehearsal node: every request on one dial-stdio channel."""

import pytest

from sparkrack.fleet import Fleet

pytestmark = pytest.mark.rack


def test_one_docker_client_serves_every_path_on_one_dial_stdio_channel(inventory):
    """docker-py would open a channel (a `docker system dial-stdio` on the node) per URL."""
    with Fleet(inventory, inventory.select("spark-01")) as fleet:
        client = fleet.docker_client("spark-01")
        containers = client.containers.list(all=True)
        client.images.list()
        client.info()
        client.api.version()
        for container in containers[:3]:
            client.containers.get(container.id)
        dials = fleet.run(["pgrep", "-cf", "^docker system dial-stdio"])["spark-01"]
    assert dials.ok and dials.stdout.strip() == "1", dials
