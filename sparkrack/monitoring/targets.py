"""What Prometheus scrapes on a rack: one `TargetKind` per job, whose target groups (file_sd's
`targets` and `labels`) are made from the inventory. A new kind of target is one entry in
KINDS (the fleet's router goes there, its groups from the fleet file); a kind that finds no
target has no job. Target labels never repeat a label the scraped series carry (the
watchdog's `node` and `rank`, vLLM's `engine`): Prometheus would rename the series' own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sparkrack.engines import engine_names, load_engine
from sparkrack.engines.spec import lane_ports
from sparkrack.inventory import Inventory
from sparkrack.inventory.watchdog_record import read_record, watchdog_node


@dataclass(frozen=True)
class TargetGroup:
    """One file_sd group: the addresses scraped and the labels put on their series."""

    targets: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"targets": list(self.targets), "labels": dict(self.labels)}


@dataclass(frozen=True)
class TargetKind:
    """A Prometheus job: its name, what it scrapes, and its groups for an inventory
    (`on`: the watchdog's node as `--on` names it, None: where it is recorded, else the head)."""

    job: str
    what: str
    groups: Callable[[Inventory, str | None], tuple[TargetGroup, ...]]
    interval_s: int = 5  # the watchdog polls every second; 5 s keeps alerts close to it
    timeout_s: int = 4
    path: str = "/metrics"


def host_port(address: str, port: int) -> str:
    """ADDRESS:PORT as Prometheus takes it ([v6]:port)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def watchdog_groups(inventory: Inventory, on: str | None) -> tuple[TargetGroup, ...]:
    """The watchdog service: its node's management address on watchdog_metrics_port."""
    node = watchdog_node(inventory, on, read_record(inventory.path))
    return (TargetGroup((host_port(node.address, inventory.vars.watchdog_metrics_port),),
                        {"rack": inventory.vars.rack_name}),)


def engine_groups(inventory: Inventory, on: str | None) -> tuple[TargetGroup, ...]:
    """Rank 0's /metrics on each engine's API port (the inventory's api_port, when set,
    for all of them: one target). Only rank 0 serves the API and its metrics; every rank's
    GPU, memory and container are the watchdog's series (labels node, rank)."""
    head = inventory.head
    ports: dict[int, list[str]] = {}
    for engine in engine_names(inventory.path):
        definition = load_engine(inventory.path, engine, inventory.vars.images)
        ports.setdefault(lane_ports(inventory, definition)["http"], []).append(engine)
    return tuple(TargetGroup((host_port(head.address, port),),
                             {"rack": inventory.vars.rack_name, "node": head.name})
                 for port in sorted(ports))


# The fleet's router (SMG, docs/fleet.md): its address comes from a fleet file, not from an
# inventory, so render() adds its job when RenderOptions names it
ROUTER = TargetKind("sparkrack-router", "the fleet's router (SMG): requests routed and "
                    "failed (smg_router_*), its workers' state", lambda inventory, on: ())


def router_groups(metrics: str, fleet: str) -> tuple[TargetGroup, ...]:
    """The router's Prometheus port (ADDRESS:PORT), its series labelled with the fleet."""
    return (TargetGroup((metrics,), {"fleet": fleet}),)


KINDS = (
    TargetKind("sparkrack-watchdog", "the watchdog service: every rank's GPU, memory, "
               "container and clock cap, the group, the strip", watchdog_groups),
    TargetKind("sparkrack-engine", "rank 0's engine metrics: tokens, requests, TTFT and "
               "inter-token latency (vLLM vllm:*, SGLang sglang:*)", engine_groups),
)
