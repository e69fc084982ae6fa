"""What the bench measures: the running deployment, found from what runs on the rack.

The engine containers' labels say engine, profile, deployment and spec hash; rank 0's
container says the image ID and the port its argv gave; the `current` deployment record
on the head node adds when it started (and is cross-checked against the labels); rank 0's
`/v1/models` gives the served model name and its context length.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from ..engines import LABEL_SPEC_HASH, build_specs
from ..errors import SparkrackError
from ..fleet import Fleet
from ..inventory import Inventory, Node
from ..lifecycle import record
from ..lifecycle.containers import container, engine_containers
from .client import BenchError, Endpoint


class NoEngine(SparkrackError):
    """No engine serves on the rack."""


@dataclass
class Target:
    """The deployment under test and where its rank 0 answers."""

    engine: str
    profile: str
    deployment_id: str
    spec_hash: str
    image: str
    image_id: str
    node: str
    address: str
    port: int
    model: str
    context_length: int | None
    deployment_started: float | None = None
    record_note: str | None = None  # when the current record disagrees with the labels

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"{self.engine} {self.profile} (deployment {self.deployment_id}, image "
                f"{self.image_id[:19]}, spec {self.spec_hash[:12]}) at {self.address}:{self.port}")


def argv_port(argv: list[str]) -> int | None:
    """The value of --port in an engine's argv (`--port N` or `--port=N`)."""
    for i, word in enumerate(argv):
        if word == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if word.startswith("--port=") and word[7:].isdigit():
            return int(word[7:])
    return None


def find_target(fleet: Fleet, inventory: Inventory) -> tuple[Target, Endpoint]:
    """The running deployment and an Endpoint on its rank 0; NoEngine (one line, naming what
    to do) when nothing serves, BenchError when rank 0 does not answer."""
    ranks, errors = engine_containers(fleet)
    alive = [r for r in ranks if r.alive]
    rack = inventory.vars.rack_name
    if not alive:
        if inventory.head.name in errors:
            raise NoEngine(f"cannot see the engine containers on {inventory.head.name}: "
                           f"{errors[inventory.head.name]}",
                           fix="check the node with `invoke status`")
        if ranks:
            stopped = sorted({r.deployment for r in ranks})
            raise NoEngine(f"no engine is running on {rack} ({len(ranks)} stopped rank "
                           f"container(s) of {', '.join(stopped)})",
                           fix="`invoke down` clears them; then `invoke up --engine sglang` or "
                               "`invoke up --engine vllm` and run `invoke bench` again")
        raise NoEngine(f"no engine is running on {rack}",
                       fix="start one with `invoke up --engine sglang` or `invoke up --engine vllm`, then run "
                           "`invoke bench` again")
    deployments = sorted({r.deployment for r in alive})
    if len(deployments) > 1:
        raise NoEngine(f"ranks of {len(deployments)} deployments run at once ({', '.join(deployments)})",
                       fix="`invoke down`, then `invoke up` the one to measure")
    head = next((r for r in alive if r.rank == 0), None)
    if head is None:
        raise NoEngine(f"rank 0 of {deployments[0]} is not running ({len(alive)} rank(s) are)",
                       fix="`invoke down`, then `invoke up` again")
    attrs = container(fleet, head.node, head.name).attrs
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    argv = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
    port = argv_port(argv)
    if port is None:  # fall back to what the profile says
        port = build_specs(inventory, head.engine, head.profile)[0].ports["http"]
    node: Node = inventory.node(head.node)
    target = Target(engine=head.engine, profile=head.profile, deployment_id=head.deployment,
                    spec_hash=labels.get(LABEL_SPEC_HASH, ""), image=config.get("Image", ""),
                    image_id=attrs.get("Image", ""), node=node.name, address=node.address,
                    port=port, model=inventory.vars.model_name, context_length=None)
    try:
        current = record.read(fleet, inventory)["current"]
    except SparkrackError as exc:
        current, target.record_note = None, f"deployment record not read: {exc.line()}"
    if current is not None and current.deployment_id == target.deployment_id:
        target.deployment_started = current.started
        target.image_id = target.image_id or current.image_id
        target.spec_hash = target.spec_hash or current.spec_hash
    elif current is not None:
        target.record_note = (f"the current record is {current.deployment_id}, not the running "
                              f"{target.deployment_id}")
    elif target.record_note is None:
        target.record_note = "no current deployment record on the head"
    endpoint = Endpoint(node, port)
    health = endpoint.get("/health", timeout=10)[0]
    if health != 200:
        raise BenchError(f"rank 0 of {target.deployment_id} at {node.address}:{port} answers "
                         f"/health with HTTP {health}",
                         fix="wait until it is ready (`invoke status`), or see `invoke watch`")
    models = endpoint.get_json("/v1/models") or {}
    cards = [c for c in models.get("data") or [] if isinstance(c, dict)]
    if cards:
        target.model = str(cards[0].get("id") or target.model)
        length = cards[0].get("max_model_len")
        target.context_length = length if isinstance(length, int) else None
    endpoint.model = target.model
    return target, endpoint


def stamp(when: float | None = None) -> str:
    """A local timestamp for names: 20261130-111148."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
