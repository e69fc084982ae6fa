"""What the bench measures: the running deployment, found from what runs on the rack.

The engine containers' labels say engine, profile, deployment and spec hash (the running
deployment: deployments.running); rank 0's container says the image ID and the port its argv
gave; the `current` deployment record on the head node is the deployment measured when it
names the same one (cross-checked against the labels); rank 0's `/v1/models` gives the
served model name and its context length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.headapi import Endpoint, HeadError
from sparkrack.deployments.record import Deployment
from sparkrack.deployments.running import running
from sparkrack.engines import LABEL_SPEC_HASH, build_specs
from sparkrack.engines.serving import Metrics, engine_serving
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node


class NoEngine(SparkrackError):
    """No engine serves on the rack."""


@dataclass
class Target:
    """The deployment under test (its record, or what its labels say when the head has no
    record of it) and where its rank 0 answers."""

    deployment: Deployment
    node: str
    address: str
    port: int
    model: str
    context_length: int | None
    metrics: Metrics  # what its engine's file says rank 0's /metrics serves
    recorded: bool = False  # deployment is the head's `current` record
    record_note: str | None = None  # when the current record disagrees with the labels

    def as_dict(self) -> dict:
        """The result file's "deployment" object."""
        d = self.deployment
        return {"engine": d.engine, "profile": d.profile, "deployment_id": d.deployment_id,
                "spec_hash": d.spec_hash, "image": d.image, "image_id": d.image_id,
                "node": self.node, "address": self.address, "port": self.port,
                "model": self.model, "context_length": self.context_length,
                "deployment_started": d.started if self.recorded else None,
                "record_note": self.record_note}

    def describe(self) -> str:
        d = self.deployment
        return (f"{d.engine} {d.profile} (deployment {d.deployment_id}, image "
                f"{d.image_id[:19]}, spec {d.spec_hash[:12]}) at {self.address}:{self.port}")


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
    to do) when nothing serves, HeadError when rank 0 does not answer."""
    found = running(fleet)
    ranks, errors, alive = found.ranks, found.errors, found.alive
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
    deployments = found.deployments
    if len(deployments) > 1:
        raise NoEngine(f"ranks of {len(deployments)} deployments run at once ({', '.join(deployments)})",
                       fix="`invoke down`, then `invoke up` the one to measure")
    head = found.head
    if head is None:
        raise NoEngine(f"rank 0 of {deployments[0]} is not running ({len(alive)} rank(s) are)",
                       fix="`invoke down`, then `invoke up` again")
    rank0 = fleet.docker(head.node).container(head.name)
    port = argv_port(list(rank0.argv))
    if port is None:  # fall back to what the profile says
        port = build_specs(inventory, head.engine, head.profile)[0].ports["http"]
    node: Node = inventory.node(head.node)
    labelled = Deployment(engine=head.engine, profile=head.profile,
                          deployment_id=head.deployment,
                          spec_hash=rank0.labels.get(LABEL_SPEC_HASH, ""),
                          image=rank0.image, image_id=rank0.image_id)
    target = Target(labelled, node=node.name, address=node.address, port=port,
                    model=inventory.vars.model_name, context_length=None,
                    metrics=engine_serving(inventory.path, head.engine).metrics)
    try:
        current = record.read(fleet, inventory)["current"]
    except SparkrackError as exc:
        current, target.record_note = None, f"deployment record not read: {exc.line()}"
    if current is not None and current.deployment_id == labelled.deployment_id:
        target.deployment = replace(current, image=labelled.image or current.image,
                                    image_id=labelled.image_id or current.image_id,
                                    spec_hash=labelled.spec_hash or current.spec_hash)
        target.recorded = True
    elif current is not None:
        target.record_note = (f"the current record is {current.deployment_id}, not the running "
                              f"{labelled.deployment_id}")
    elif target.record_note is None:
        target.record_note = "no current deployment record on the head"
    endpoint = Endpoint(node, port)
    health = endpoint.get("/health", timeout=10)[0]
    if health != 200:
        raise HeadError(f"rank 0 of {labelled.deployment_id} at {node.address}:{port} answers "
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
