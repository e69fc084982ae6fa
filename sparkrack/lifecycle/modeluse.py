"""Which model directories the rack's lanes use: the profiles' paths, and the one the
current deployment runs from, which `weights.remove` must not take away."""

from __future__ import annotations

from sparkrack.core.errors import UsageError
from sparkrack.deployments import record
from sparkrack.engines import engine_names, load_engine, model_path_of
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory


def used_by(inventory: Inventory) -> dict[str, list[str]]:
    """{model path: the profiles ("engine profile") that run from it}."""
    used: dict[str, list[str]] = {}
    for engine in engine_names(inventory.path):
        definition = load_engine(inventory.path, engine, inventory.vars.images)
        for profile in definition.profiles.values():
            used.setdefault(model_path_of(inventory, profile).rstrip("/"), []).append(
                f"{engine} {profile.name}")
    return used


def runs_from(inventory: Inventory, deployment: record.Deployment) -> str:
    """The model directory a recorded deployment runs from (older records: its profile's)."""
    if deployment.model_path:
        return deployment.model_path.rstrip("/")
    try:
        definition = load_engine(inventory.path, deployment.engine, inventory.vars.images)
        profile = definition.profile(deployment.profile)
    except UsageError:
        profile = None
    return model_path_of(inventory, profile).rstrip("/")


def refuse_removal_in_use(fleet: Fleet, inventory: Inventory, path: str) -> None:
    """UsageError if the current deployment (the head's record) runs from path."""
    current = record.read(fleet, inventory)["current"]
    if current is not None and runs_from(inventory, current) == path.rstrip("/"):
        raise UsageError(f"{path} is in use: the current deployment {current.describe()} "
                         "runs from it", fix="`invoke down` or `invoke roll` to another lane first")
