"""Draining rank 0 before a stop: SIGTERM to rank 0 alone, then its in-flight requests
watched on its own metrics until none is left, it exits, or the inventory's drain budget
passes (docs/engines.md#draining). What each engine does on SIGTERM is its own: SGLang
answers 503 on /health and still takes requests; vLLM (with --shutdown-timeout) refuses
them and keeps /health at 200. The running rank names its engine: its profile file is
read once per drain (`drain_api`), not at each reading.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkrack.deployments.headapi import Endpoint, HeadError, parse_prometheus
from sparkrack.deployments.ranks import Rank, first_line
from sparkrack.engines import load_engine
from sparkrack.engines.serving import Metrics
from sparkrack.engines.spec import lane_ports
from sparkrack.fleet import Fleet

POLL_S = 0.5  # between two readings of rank 0's metrics while it drains


@dataclass
class Drain:
    """One drain of rank 0: what was in flight, what was left, how long it took."""

    budget_s: int
    in_flight: int | None = None  # running + waiting when SIGTERM was sent (None: unread)
    left: int | None = None  # still in flight when the drain ended (None: unread)
    seconds: float = 0.0
    health: int | None = None  # rank 0's health path after SIGTERM (None: no answer)
    ended: str = ""  # drained | exited | budget | failed

    @property
    def drained(self) -> int | None:
        """Requests of those in flight at SIGTERM that finished (None when not read)."""
        if self.in_flight is None:
            return None
        return max(0, self.in_flight - (self.left or 0))

    def record(self) -> dict:
        """The audit record's `drain` entry."""
        return {"in_flight": self.in_flight, "drained": self.drained, "left": self.left,
                "seconds": round(self.seconds, 2), "budget_s": self.budget_s,
                "health_after_sigterm": self.health, "ended": self.ended}

    def describe(self) -> str:
        count = "?" if self.drained is None else str(self.drained)
        text = f"drained {count} request(s) in {self.seconds:.1f} s (budget {self.budget_s} s)"
        if self.ended == "budget":
            text += f"; {self.left if self.left is not None else '?'} still in flight when " \
                    "the budget ran out"
        return text


@dataclass(frozen=True)
class DrainApi:
    """Rank 0's endpoint, its health path and the metrics its engine file names."""

    endpoint: Endpoint
    health_path: str
    metrics: Metrics


def drain_api(fleet: Fleet, head: Rank) -> DrainApi:
    """What a drain reads of rank 0, from the profile file of the engine it runs."""
    inventory = fleet.inventory
    definition = load_engine(inventory.path, head.engine, inventory.vars.images)
    port = lane_ports(inventory, definition)["http"]
    return DrainApi(Endpoint(inventory.node(head.node), port), definition.health_path,
                   definition.serving.metrics)


def in_flight(api: DrainApi) -> int | None:
    """Requests running or waiting on rank 0 (drain_api), from its own /metrics (None when
    its engine file's gauges cannot be read there)."""
    endpoint, metrics = api.endpoint, api.metrics
    try:
        status, body = endpoint.get("/metrics", timeout=3.0)
    except HeadError:
        return None
    values = parse_prometheus(body.decode(errors="replace")) if status == 200 else {}
    if metrics.running not in values:
        return None
    return int(values[metrics.running] + values.get(metrics.waiting, 0.0))


def drain_head(fleet: Fleet, head: Rank, *, budget_s: int | None = None,
               on_event: Callable[[str], None] = lambda e: None) -> Drain:
    """SIGTERM to rank 0, then wait until none of its requests is left (its metrics), it
    exits, or budget_s (the inventory's drain_budget_s) passes; the Drain."""
    budget = fleet.inventory.vars.drain_budget_s if budget_s is None else budget_s
    drain = Drain(budget)
    api = drain_api(fleet, head)
    endpoint, health_path = api.endpoint, api.health_path
    drain.in_flight = in_flight(api)
    began = time.monotonic()
    try:
        docker = fleet.docker(head.node)
        docker.signal(head.name, "SIGTERM")
    except Exception as exc:  # a lost node, dockerd or container: the stop that follows says more
        drain.ended = "failed"
        on_event(f"drain: could not signal rank 0 on {head.node}: {first_line(exc)}")
        return drain
    drain.health = endpoint.status(health_path, timeout=3.0)
    said = "?" if drain.in_flight is None else drain.in_flight
    on_event(f"draining rank 0 on {head.node}: SIGTERM sent, {health_path} answers "
             f"{drain.health or 'nothing'}, {said} request(s) in flight, budget {budget} s")
    while True:
        try:
            alive = docker.container(head.name).alive
        except Exception:
            alive = False
        if not alive:
            # both engines exit on SIGTERM only once their requests are done, or (vLLM) at its
            # --shutdown-timeout, the budget (docs/engines.md): gone within it, none was left
            within = time.monotonic() - began < budget
            drain.ended = "exited"
            drain.left = 0 if drain.left is None or within else drain.left
            break
        drain.left = in_flight(api)
        if drain.left == 0:
            drain.ended = "drained"
            break
        if time.monotonic() - began >= budget:
            drain.ended = "budget"
            break
        time.sleep(POLL_S)
    drain.seconds = time.monotonic() - began
    on_event(drain.describe())
    return drain

