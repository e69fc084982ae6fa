"""What a start may ask of each node's dockerd: the limits adapter, chosen by the inventory
in `for_rack` (start.prepare). A real rack gets `EXACT`, every option as asked; a rehearsal
inventory gets `RehearsalLimits`, fitted to each node's dockerd and said
(docs/rehearsal.md#docker-options-a-rehearsal-node-cannot-give).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import docker.types

from sparkrack.remote import text


@dataclass(frozen=True)
class NodeLimits:
    """What a node's dockerd can give a container."""

    hard_limits: dict  # ulimit name -> hard limit (-1: unlimited)
    devices: frozenset  # device paths present (non-empty directories count)
    gpu_driver: bool  # nvidia-container-runtime-hook on dockerd's PATH


def parse_probe(text: str) -> NodeLimits:
    """NodeLimits from remote/dockerlimits.sh's output."""
    limits, devices, gpu = {}, set(), False
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key in ("memlock", "nofile") and value:
            limits[key] = -1 if value == "unlimited" else int(value)
        elif key == "device":
            devices.add(value)
        elif key == "gpu-hook":
            gpu = True
    return NodeLimits(limits, frozenset(devices), gpu)


@dataclass(frozen=True)
class Exact:
    """A real rack: the docker options as asked, nothing probed."""

    def fit(self, node: str, kwargs: dict) -> tuple[dict, list[str]]:
        """kwargs unchanged, no deviation."""
        return kwargs, []


EXACT = Exact()


@dataclass(frozen=True)
class RehearsalLimits:
    """A rehearsal rack: each node's probed limits, the options fitted to them."""

    nodes: Mapping[str, NodeLimits]

    def fit(self, node: str, kwargs: dict) -> tuple[dict, list[str]]:
        """(kwargs node's dockerd can start, the deviations) (fit_kwargs)."""
        return fit_kwargs(kwargs, self.nodes[node])


Limits = Exact | RehearsalLimits


def for_rack(fleet, inventory, nodes: Sequence[str]) -> Limits:
    """The adapter for inventory's rack: RehearsalLimits (nodes probed) on a rehearsal
    inventory, else EXACT."""
    return RehearsalLimits(probe(fleet, nodes)) if inventory.is_rehearsal else EXACT


def probe(fleet, nodes=None) -> dict[str, NodeLimits]:
    """{node: NodeLimits} of the fleet's nodes (or the named ones), one SSH round trip."""
    names = [n.name for n in fleet.nodes] if nodes is None else list(nodes)
    result = fleet.run({name: ["sh", "-c", text("dockerlimits")] for name in names}, timeout=20)
    result.raise_for_failures()
    return {r.node: parse_probe(r.stdout) for r in result}


def fit_kwargs(kwargs: dict, limits: NodeLimits) -> tuple[dict, list[str]]:
    """(kwargs the node can start, what was changed) for docker_sdk_kwargs output."""
    fitted = copy.copy(kwargs)
    changes = []
    if fitted.get("device_requests") and not limits.gpu_driver:
        fitted["device_requests"] = []
        changes.append("--gpus all dropped (no nvidia-container-runtime-hook on dockerd's "
                       "PATH)")
    kept = []
    for device in fitted.get("devices", []):
        if device.split(":", 1)[0] in limits.devices:
            kept.append(device)
        else:
            changes.append(f"--device {device.split(':', 1)[0]} dropped (not on the node)")
    fitted["devices"] = kept
    ulimits = []
    for limit in fitted.get("ulimits", []):
        name, soft, want = limit["Name"], limit["Soft"], limit["Hard"]
        hard = limits.hard_limits.get(name)
        if hard is not None and hard != -1 and (want == -1 or want > hard):
            changes.append(f"--ulimit {name}={soft}:{want} lowered to {min_limit(soft, hard)}:"
                           f"{hard} (the node's hard limit; no CAP_SYS_RESOURCE here)")
            limit = docker.types.Ulimit(name=name, soft=min_limit(soft, hard), hard=hard)
        ulimits.append(limit)
    fitted["ulimits"] = ulimits
    return fitted, changes


def min_limit(soft: int, hard: int) -> int:
    """soft, lowered to hard (-1 is unlimited)."""
    return hard if soft == -1 or soft > hard else soft
