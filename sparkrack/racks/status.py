"""`invoke fleet.status`: every rack of the fleet file, what it serves, and the router's
view of it (docs/fleet.md#looking-at-the-fleet)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.headapi import Endpoint
from sparkrack.deployments.running import running
from sparkrack.engines import load_engine
from sparkrack.engines.spec import lane_ports
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.racks.fleetfile import Fleet as FleetFile
from sparkrack.racks.router import Router, RouterError, Worker


@dataclass
class RackRow:
    """One rack as the fleet sees it."""

    rack: str  # its rack_name
    inventory: str
    api: str | None  # its head's API (the router's worker URL), None when nothing serves
    serving: str | None  # "sglang 512k", None when nothing runs
    health: int | None  # its head's health path now (None: no answer)
    router: str  # ready | draining | ... (", unhealthy") | not registered | unknown (router down)
    load: int | None  # requests the router has in flight on it
    problem: str | None = None


def head_api(inventory: Inventory, fleet: Fleet) -> tuple[str | None, str | None, str]:
    """(its head's API URL, "engine profile", its health path) of what runs on the rack
    (None, None, "") when no rank 0 runs; SparkrackError naming the head when its docker
    cannot be asked (it does not answer SSH)."""
    found = running(fleet, [inventory.head])
    if inventory.head.name in found.errors:
        raise SparkrackError(f"{inventory.head.name} (the head): "
                             f"{found.errors[inventory.head.name]}")
    head = found.head
    if head is None:
        return None, None, ""
    definition = load_engine(inventory.path, head.engine, inventory.vars.images)
    port = lane_ports(inventory, definition)["http"]
    return (f"http://{inventory.head.address}:{port}", f"{head.engine} {head.profile}",
            definition.health_path)


def rack_row(inventory: Inventory, workers: list[Worker] | None) -> RackRow:
    """The row of one rack (workers: the router's list, None when it did not answer). A
    head that does not answer still shows the router's view of it: the worker at its
    address, unhealthy once the router's health checks fail."""
    row = RackRow(inventory.vars.rack_name, str(inventory.path), None, None, None,
                  "unknown" if workers is None else "not registered", None)
    try:
        with Fleet(inventory, [inventory.head]) as fleet:
            row.api, row.serving, health_path = head_api(inventory, fleet)
    except SparkrackError as error:
        row.problem = error.line()
    if row.api is not None:
        row.health = Endpoint(inventory.head, int(row.api.rsplit(":", 1)[1])).status(
            health_path, timeout=3.0)
    found = next((w for w in workers or [] if (w.url.rstrip("/") == row.api if row.api
                  else urlsplit(w.url).hostname == inventory.head.address)), None)
    if found is not None:
        row.router = found.status if found.healthy else f"{found.status}, unhealthy"
        row.load = found.load
    return row


def fleet_status(fleet: FleetFile) -> tuple[list[RackRow], str | None]:
    """Every rack's row, and why the router did not answer (None when it did)."""
    router = Router(fleet.router)
    try:
        workers: list[Worker] | None = router.workers()
        problem = None
    except RouterError as error:
        workers, problem = None, error.line()
    return [rack_row(inventory, workers) for inventory in fleet.inventories()], problem


def as_json(rows: list[RackRow], problem: str | None, fleet: FleetFile) -> dict:
    return {"fleet": fleet.name, "router": {"url": fleet.router.url, "problem": problem},
            "racks": [asdict(row) for row in rows]}
