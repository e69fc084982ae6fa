"""The readiness wait (lifecycle/start.wait_ready) with stand-ins for the fleet and docker:
a node lost between the liveness probe and the container poll is a NodeLost (its rank
cannot be stopped from here), not a rank that died."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkrack.engines import build_specs, lane_specs, resolve_lane
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import start
from sparkrack.lifecycle.start import NodeLost, StartFailed, as_rank, wait_ready

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"


class AllAnswer:
    """A fleet whose every node answers the liveness probe."""

    def __init__(self, nodes):
        self.nodes = nodes

    def run(self, argv, timeout=None):
        return [SimpleNamespace(node=n.name, status="ok", error=None) for n in self.nodes]


@pytest.fixture
def group():
    inventory = load_inventory(REHEARSAL)
    specs = build_specs(inventory, "sglang", "512k")
    return inventory, specs, [as_rank(s, "running") for s in specs]


def test_a_node_lost_after_the_probe_is_node_lost(group, monkeypatch):
    inventory, specs, ranks = group
    lost = [replace(r, status="unreachable", error="Connection aborted.") if r.node == "spark-07"
            else r for r in ranks]
    monkeypatch.setattr(start, "refresh", lambda fleet, ranks: lost)
    with pytest.raises(NodeLost) as raised:
        wait_ready(AllAnswer(inventory.nodes), inventory, specs, ranks, 5, lambda p: None,
                   "/health")
    assert raised.value.node == "spark-07"
    assert "node spark-07 lost during the start (Connection aborted.)" in raised.value.line()


def test_a_rank_that_exited_is_a_failed_start_naming_it(group, monkeypatch):
    inventory, specs, ranks = group
    exited = [replace(r, status="exited", exit_code=2) if r.rank == 3 else r for r in ranks]
    monkeypatch.setattr(start, "refresh", lambda fleet, ranks: exited)
    monkeypatch.setattr(start, "logs_tail", lambda fleet, rank: ["bad flag"])
    with pytest.raises(StartFailed) as raised:
        wait_ready(AllAnswer(inventory.nodes), inventory, specs, ranks, 5, lambda p: None,
                   "/health")
    assert not isinstance(raised.value, NodeLost)
    assert "rank 3 on spark-04 exited (exit code 2)" in raised.value.line()


class Asked:
    """An Endpoint stand-in that answers 200 and records which node was asked which path."""

    paths: list[tuple[str, str]] = []

    def __init__(self, node, port):
        self.node = node

    def status(self, path, timeout=None):
        Asked.paths.append((self.node.name, path))
        return 200


def own_engine_file(tmp_path, engine, old, new):
    """A copy of the rehearsal inventory whose own profile file of engine has old -> new."""
    import shutil

    from sparkrack.data import shipped

    inventory = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    (inventory / ".sparkrack" / "engines").mkdir(parents=True, exist_ok=True)
    text = (shipped("engines") / f"{engine}.yml").read_text()
    assert old in text
    (inventory / ".sparkrack" / "engines" / f"{engine}.yml").write_text(text.replace(old, new))
    return load_inventory(inventory)


@pytest.mark.parametrize("engine, old, new, asked", [
    ("sglang", "worker_health_path: /health", "worker_health_path: /ready", "/ready"),
    ("vllm", "worker_health_path: null", "worker_health_path: null", None)])
def test_the_workers_are_asked_where_the_engine_file_says(tmp_path, monkeypatch, engine, old,
                                                          new, asked):
    """Whether and where ranks >= 1 answer once loaded is the engine file's
    serving.worker_health_path (SGLang's stand-in /health; vLLM's headless workers serve
    nothing), not a flag or an engine name in the code."""
    inventory = own_engine_file(tmp_path, engine, old, new)
    lane = resolve_lane(inventory, engine, "512k")
    specs = lane_specs(inventory, lane)
    Asked.paths = []
    monkeypatch.setattr(start, "refresh", lambda fleet, ranks: ranks)
    monkeypatch.setattr(start, "Endpoint", Asked)
    ranks = [as_rank(s, "running") for s in specs]
    wait_ready(AllAnswer(inventory.nodes), inventory, specs, ranks, 5, lambda p: None,
               lane.serving.worker_health_path)
    workers = sorted(path for node, path in Asked.paths if node != inventory.head.name)
    assert workers == ([asked] * 7 if asked else [])
    assert (inventory.head.name, specs[0].health_path) in Asked.paths
