"""The engine resolved once (issue 55, item 1): one `invoke up` reads the engine's profile
file once, and so do a roll's restore of the last good deployment, `invoke plan` and
`invoke export`;
everything below the lane (gates, launch specs, rules, memory gate, readiness, the URL)
reads the lane.

No rack: the fleet, docker, the burn and rank 0's endpoints are stand-ins; the gates, the
specs, the rules, the start and the CLI's `start_lane` are the real code."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkrack.cli import serve_tasks
from sparkrack.deployments import record
from sparkrack.engineenv import inventory_views
from sparkrack.engines import datafile
from sparkrack.facts.node import GpuFacts, NodeFacts, UnitFacts
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import gates, lanes, start
from sparkrack.safety.burn import BurnResult

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"
IMAGE_ID = "sha256:" + "ab" * 32


class Docker:
    """A node's dockerd as the gates and the start use it."""

    def image_info(self, image):
        return IMAGE_ID, {}

    def start(self, name):
        pass


class OneFleet:
    """The fleet as `up` opens it: every node answers, its docker the stand-in."""

    def __init__(self, inventory, nodes=None):
        self.inventory = inventory
        self.nodes = list(inventory.nodes)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, argv, timeout=None, **kwargs):
        return [SimpleNamespace(node=n.name, status="ok", stdout="", error="") for n in self.nodes]

    def docker(self, node):
        return Docker()


def node_facts() -> NodeFacts:
    return NodeFacts(boot_id="b1", kernel="6.17.0-1008-nvidia", mem_total_kb=128 << 20,
                     mem_available_kb=120 << 20, gpu=GpuFacts(compute_cap="12.1"),
                     clock_cap=UnitFacts(load="loaded", active="active", result="success"))


@pytest.fixture
def profile_reads(monkeypatch, gate_burn):
    """One `up`'s world with stand-ins for the nodes; returns the engine profile files read
    (every read of a profile goes through datafile.read_yaml)."""
    inventory = load_inventory(REHEARSAL)
    inventory = dataclasses.replace(inventory, vars=dataclasses.replace(inventory.vars, pdu=None))
    env = inventory_views(inventory, "sglang")  # the env files each node holds

    def gather(fleet, env_files, report):
        report.facts.update({n.name: node_facts() for n in inventory.nodes})
        report.env.update(env)
        report.add("reachable", [], "all answer")

    @gate_burn
    def burn(inventory, nodes, fleet=None):
        return [BurnResult(n.name, True, "ok", "fine", 2200) for n in nodes]

    monkeypatch.setattr(serve_tasks, "inventory_from", lambda path: inventory)
    monkeypatch.setattr(lanes, "Fleet", OneFleet)
    monkeypatch.setattr(gates, "gather_facts_and_env", gather)
    monkeypatch.setattr(gates, "EnvFiles", lambda inventory, key: SimpleNamespace(
        files=lambda node: ["/etc/sparkrack/nccl.env"], rewrite_moved=lambda fleet, env: ([], [])))
    monkeypatch.setattr(gates, "running", lambda fleet: SimpleNamespace(alive=[], errors={}))
    monkeypatch.setattr(gates, "gate_problems", lambda fleet, nodes, path: ("d" * 64, []))
    monkeypatch.setattr(lanes, "prepare", lambda fleet, inventory, specs, on_event: None)
    monkeypatch.setattr(start, "prepare", lambda fleet, inventory, specs, on_event: None)
    monkeypatch.setattr(start, "create_all", lambda fleet, specs, limits, on_event: None)
    monkeypatch.setattr(start, "refresh", lambda fleet, ranks: [
        dataclasses.replace(r, status="running") for r in ranks])
    monkeypatch.setattr(start, "Endpoint", lambda node, port: SimpleNamespace(
        status=lambda path, timeout=None: 200))
    monkeypatch.setattr(start, "judge_nccl", lambda *args: None)
    monkeypatch.setattr(lanes, "smoke_test", lambda inventory, specs: "ready")
    monkeypatch.setattr(lanes, "note", lambda **changed: None)
    monkeypatch.setattr(record, "write", lambda fleet, inventory, kind, deployment: None)
    monkeypatch.setattr(record, "clear", lambda fleet, inventory, kind: None)

    reads: list[str] = []
    read_yaml = datafile.read_yaml

    def counted(file, *args, **kwargs):
        if Path(file).parent.name == "engines":
            reads.append(Path(file).name)
        return read_yaml(file, *args, **kwargs)

    monkeypatch.setattr(datafile, "read_yaml", counted)
    return SimpleNamespace(reads=reads, inventory=inventory)


def test_one_up_reads_the_engine_profile_once(profile_reads, capsys):
    serve_tasks.start_lane(lanes.up, "up: {deployment} serving at {url}", "sglang", "512k",
                           None, None, None, False)
    said = capsys.readouterr()
    said = said.out + said.err
    assert "serving at http://10.77.1.11:30000/v1" in said  # the URL, from the lane
    assert profile_reads.reads == ["sglang.yml"]


def test_a_restore_reads_the_last_good_lane_s_profile_once(profile_reads):
    last = record.Deployment("vllm", "512k", "good", "h", "vllm/vllm-openai:v0.33.0",
                             IMAGE_ID)
    with lanes.Fleet(profile_reads.inventory) as fleet:
        back = lanes.restore(fleet, profile_reads.inventory, last, None, lambda p: None,
                             lambda e: None)
    assert (back.engine, back.profile, back.image) == ("vllm", "512k", last.image)
    assert profile_reads.reads == ["vllm.yml"]


def test_plan_reads_the_engine_profile_once(profile_reads, capsys):
    from invoke import Collection, Program

    Program(namespace=Collection.from_module(serve_tasks)).run(
        ["invoke", "plan", "--engine", "vllm", "--offline"], exit=False)
    assert capsys.readouterr().out.count("docker run") == 8
    assert profile_reads.reads == ["vllm.yml"]


def test_an_export_reads_the_engine_profile_once(profile_reads):
    from sparkrack.export.lws import export_lws

    exported = export_lws(profile_reads.inventory, "sglang", "512k")
    lws = next(o for o in exported.objects if o["kind"] == "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 8
    assert profile_reads.reads == ["sglang.yml"]
