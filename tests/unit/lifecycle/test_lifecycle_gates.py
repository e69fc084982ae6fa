"""Gate order (issue 11): the cheap gates run first and a refusal there never waits for the
burn; roll does not burn a node verified this boot; a failed start is recorded "failed"
and the records name the operator. No node: the gates' helpers are stand-ins."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkrack.deployments import record
from sparkrack.facts.node import NodeFacts, UnitFacts
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import gates, lanes
from sparkrack.lifecycle.start import StartFailed
from sparkrack.oplock.identity import operator
from sparkrack.safety.burn import BurnResult

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"


@pytest.fixture
def rehearsal_inventory():
    """The rehearsal inventory without its PDU (the strip gate has tests of its own here)."""
    inventory = load_inventory(REHEARSAL)
    return dataclasses.replace(inventory, vars=dataclasses.replace(inventory.vars, pdu=None))


def facts(boot: str = "b1", burned_boot: str | None = "b1", ok: bool = True,
          unit: str = "success") -> NodeFacts:
    return NodeFacts(boot_id=boot, mem_total_kb=128 << 20, mem_available_kb=120 << 20,
                     clock_cap=UnitFacts(load="loaded", active="active", result=unit),
                     burn={"ok": ok, "boot_id": burned_boot} if burned_boot else None)


@pytest.fixture
def stand_ins(rehearsal_inventory, monkeypatch, gate_burn):
    """Gates with every node-facing helper replaced; returns the knobs."""
    knobs = SimpleNamespace(facts={n.name: facts() for n in rehearsal_inventory.nodes}, refuse=None,
                            burned=[], order=[])

    def gather(fleet, env_files, report):
        knobs.order.append("reachable")
        report.facts.update(knobs.facts)
        report.env.update({name: SimpleNamespace(problems=[], gid_moved=None) for name in knobs.facts})
        report.add("reachable", [], "all answer")

    def judge(fleet, inventory, lane, specs, report, replacing):
        knobs.order.append("judge")
        report.add("no other engine", [knobs.refuse] if knobs.refuse else [], "none")

    @gate_burn
    def burn(inventory, nodes, fleet=None):
        knobs.burned.append([n.name for n in nodes])
        return [BurnResult(n.name, True, "ok", "fine", 2200) for n in nodes]

    monkeypatch.setattr(gates, "gather_facts_and_env", gather)
    monkeypatch.setattr(gates, "judge_rack", judge)
    monkeypatch.setattr(gates, "EnvFiles", lambda inventory, key: SimpleNamespace(
        files=lambda node: ["/etc/sparkrack/nccl.env"], rewrite_moved=lambda fleet, env: ([], [])))
    monkeypatch.setattr(gates, "lane_specs", lambda *a, **k: tuple(
        SimpleNamespace(node=n.name) for n in rehearsal_inventory.nodes))
    knobs.fleet = SimpleNamespace(nodes=rehearsal_inventory.nodes)
    return knobs


def run(rehearsal_inventory, knobs, **options):
    return gates.preflight(knobs.fleet, rehearsal_inventory, SimpleNamespace(image_key="sglang"),
                           deployment_id="d", **options)


def test_a_refusal_on_a_cheap_gate_does_not_burn(rehearsal_inventory, stand_ins):
    stand_ins.refuse = "vllm 512k rank 0 runs on spark-01"
    report = run(rehearsal_inventory, stand_ins)
    assert stand_ins.burned == []
    assert [g.name for g in report.blocking] == ["no other engine"]
    assert "clock cap" not in [g.name for g in report.gates]


def test_an_unreachable_node_refuses_before_anything_else(rehearsal_inventory, stand_ins,
                                                          monkeypatch):
    def lost(fleet, env_files, report):
        report.add("reachable", ["spark-05: no answer within 5 s"], "")

    monkeypatch.setattr(gates, "gather_facts_and_env", lost)
    report = run(rehearsal_inventory, stand_ins)
    assert [g.name for g in report.gates] == ["reachable"] and stand_ins.burned == []


def test_the_burn_comes_after_the_cheap_gates_on_every_node_for_up(rehearsal_inventory, stand_ins):
    report = run(rehearsal_inventory, stand_ins)
    assert stand_ins.order == ["reachable", "judge"]
    assert stand_ins.burned == [[n.name for n in rehearsal_inventory.nodes]]
    assert [g.name for g in report.gates] == ["reachable", "fabric addresses", "env files",
                                              "rails", "no other engine", "clock cap", "power"]
    assert not report.blocking


def test_the_measured_strip_refuses_and_an_override_passes_it(rehearsal_inventory, stand_ins,
                                                              monkeypatch):
    from sparkrack.safety.stripcheck import StripCheck

    asked = []

    def measured(inventory, worst, what):
        asked.append(dict(worst))
        return StripCheck("strip-a", 552, 1176, 1440, what), None

    monkeypatch.setattr(gates, "measured_strip", measured)
    report = run(rehearsal_inventory, stand_ins)
    assert asked == [{n.name: 178 for n in rehearsal_inventory.nodes}]  # verified capped
    assert [g.name for g in report.blocking] == ["strip"]
    assert report.blocking[0].detail == (
        "measured 552 W on strip-a + 1,176 W the engine would add (each node to its worst "
        "case) = 1,728 W > 1,440 W strip")
    passed = run(rehearsal_inventory, stand_ins, override_power="switch moved off the strip")
    assert not passed.blocking and passed.overrides[-1].startswith("strip: measured 552 W")
    monkeypatch.setattr(gates, "measured_strip",
                        lambda *a: (None, "PDU strip-a: timeout; judged on the projection alone"))
    unread = run(rehearsal_inventory, stand_ins)
    assert not unread.blocking and unread.gates[-1].name == "strip" and not unread.gates[-1].ok


def test_roll_burns_only_the_nodes_not_verified_this_boot(rehearsal_inventory, stand_ins):
    stand_ins.facts.update({
        "spark-02": facts(burned_boot="b0"),  # burned before the last reboot
        "spark-03": facts(ok=False),  # its last burn failed
        "spark-04": facts(unit="exit-code"),  # cap unit not successful any more
        "spark-05": facts(burned_boot=None)})  # never burned
    report = run(rehearsal_inventory, stand_ins, keep_verified=True, replacing="old")
    assert stand_ins.burned == [["spark-02", "spark-03", "spark-04", "spark-05"]]
    cap = next(g for g in report.gates if g.name == "clock cap")
    assert cap.ok and "spark-01, spark-06, spark-07, spark-08 verified this boot" in cap.detail
    power = next(g for g in report.gates if g.name == "power")
    assert power.ok


def test_roll_with_every_node_verified_burns_nothing(rehearsal_inventory, stand_ins):
    run(rehearsal_inventory, stand_ins, keep_verified=True, replacing="old")
    assert stand_ins.burned == []


def test_a_failed_start_is_recorded_failed_and_current_removed(rehearsal_inventory, monkeypatch):
    written, cleared = [], []
    monkeypatch.setattr(record, "write", lambda fleet, inv, kind, dep: written.append(
        (kind, dep.status, dep.operator, dep.error)))
    monkeypatch.setattr(record, "clear", lambda fleet, inv, kind: cleared.append(kind))

    def fails(*args, **kwargs):
        raise StartFailed("rank 3 on spark-04 exited (exit code 1)")

    monkeypatch.setattr(lanes, "start_group", fails)
    specs = (SimpleNamespace(engine="sglang", profile="512k", deployment_id="d1", spec_hash="h",
                             image="img", node="spark-01", container_name="r0"),)
    pre = gates.Preflight(facts={"spark-01": facts()}, image_id="sha256:x", specs=specs)
    lane = SimpleNamespace(serving=None)
    with pytest.raises(StartFailed):
        lanes.launch(None, rehearsal_inventory, lane, pre, timeout=1, on_progress=None,
                     on_event=lambda e: None)
    me = operator()
    assert written == [("current", "starting", me, ""),
                       ("failed", "failed", me, "rank 3 on spark-04 exited (exit code 1)")]
    assert cleared == ["current"]


def test_roll_takes_the_records_from_the_gates_round_trip(rehearsal_inventory, monkeypatch):
    current = record.Deployment("sglang", "512k", "old", "h", "img", "sha256:x",
                                mem_available_kb_before={"spark-01": 7})
    good = record.Deployment("vllm", "512k", "good", "h", "img", "sha256:y")
    seen = {}

    class NoFleet:
        def __init__(self, inventory):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def gate(fleet, inventory, lane, **options):
        return gates.Preflight(specs=("spec",), records={"current": current, "last-good": good,
                                                           "failed": None})

    def stop(fleet, timeout=None, on_event=None):
        return lanes.StopReport(stopped=["rank 0 of old"])

    def wait(fleet, mem_before, timeout):
        seen["mem_before"] = mem_before
        return {}

    def fails(*args, **kwargs):
        raise StartFailed("rank 3 exited")

    def restore(fleet, inventory, last, *args):
        seen["restored"] = last.deployment_id
        return last

    monkeypatch.setattr(record, "read", lambda *a: pytest.fail("a separate records trip"))
    monkeypatch.setattr(lanes, "Fleet", NoFleet)
    monkeypatch.setattr(lanes, "running", lambda fleet: SimpleNamespace(deployment="old"))
    monkeypatch.setattr(lanes, "preflight", gate)
    monkeypatch.setattr(lanes, "stop_group", stop)
    monkeypatch.setattr(lanes, "wait_memory", wait)
    monkeypatch.setattr(record, "clear", lambda fleet, inventory, kind: seen.setdefault(
        "cleared", kind))
    monkeypatch.setattr(lanes, "refresh_memory", fails)
    monkeypatch.setattr(lanes, "restore", restore)
    monkeypatch.setattr(lanes, "note", lambda **changed: None)
    with pytest.raises(lanes.RollFailed, match="rolled back to the last known-good"):
        lanes.roll(rehearsal_inventory, "vllm", "512k")
    assert seen == {"mem_before": {"spark-01": 7}, "cleared": "current", "restored": "good"}


def test_restore_brings_back_the_last_good_image_not_the_inventory_s(rehearsal_inventory,
                                                                      monkeypatch):
    """After an upgrade's roll fails, the version that served comes back: restore gates and
    launches the last good deployment's own image, without burning again the nodes a burn
    verified this boot (the rack serves nothing meanwhile)."""
    last = record.Deployment("sglang", "512k", "good", "h", "lmsysorg/sglang:v0.5.22-cu130",
                             "sha256:old")
    seen, events = {}, []
    spec = SimpleNamespace(spec_hash="h2")

    def gate(fleet, inventory, lane, **options):
        seen["image"], seen["keep_verified"] = lane.image, options["keep_verified"]
        return gates.Preflight(specs=(spec,), image_id="sha256:new")

    monkeypatch.setattr(lanes, "gated", gate)
    monkeypatch.setattr(lanes, "launch", lambda fleet, inventory, lane, pre, **kw: pre.specs)
    assert lanes.restore(None, rehearsal_inventory, last, 1, None, events.append) == (spec,)
    assert seen == {"image": "lmsysorg/sglang:v0.5.22-cu130", "keep_verified": True}
    assert events == ["note: sglang 512k spec changed since it was last good (h -> h2)",
                      "note: lmsysorg/sglang:v0.5.22-cu130 is sha256:new now, sha256:old when it "
                      "was last good"]


def test_ctrl_c_during_the_smoke_request_stops_the_group_and_records_the_failure(
        rehearsal_inventory, monkeypatch):
    """Chaos seed 1, step 22: Ctrl-C as a roll's smoke request ran left the new group serving
    while `current` was cleared (the record said nothing of it ran)."""
    import os
    import signal

    from sparkrack.engines import lane_specs, resolve_lane

    done = []
    lane = resolve_lane(rehearsal_inventory, "sglang", "512k")
    specs = lane_specs(rehearsal_inventory, lane, deployment_id="d1")

    def smoke(inventory, specs):
        raise KeyboardInterrupt

    def stop(fleet, timeout, recovery_timeout):
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: the stop still ends
        done.append(("stop", timeout))

    monkeypatch.setattr(lanes, "note", lambda **changed: None)
    monkeypatch.setattr(lanes, "start_group", lambda *a, **k: 0.8)
    monkeypatch.setattr(lanes, "smoke_test", smoke)
    monkeypatch.setattr(lanes, "stop_engine", stop)
    monkeypatch.setattr(record, "write", lambda fleet, inv, kind, d: done.append(
        ("write", kind, d.status)))
    monkeypatch.setattr(record, "clear", lambda fleet, inv, kind: done.append(("clear", kind)))
    with pytest.raises(KeyboardInterrupt):
        lanes.launch(None, rehearsal_inventory, lane, gates.Preflight(specs=specs),
                     timeout=None, on_progress=None, on_event=lambda e: None)
    assert done == [("write", "current", "starting"), ("stop", 10),
                    ("write", "failed", "failed"), ("clear", "current")]


def test_the_memory_gate_measures_each_node_against_its_own_memtotal(rehearsal_inventory):
    """Units differ (127,600,524-127,622,144 kB; about 119.7 GiB on another release): a
    node needs its profile's fraction of its own MemTotal free, not of another's."""
    from sparkrack.engines import build_specs, load_engine

    specs = build_specs(rehearsal_inventory, "sglang", "512k")  # --mem-fraction-static 0.80
    small, large = round(119.7 * 2**20), 127622144
    facts_by_node = {spec.node: NodeFacts(mem_total_kb=large, mem_available_kb=int(0.81 * large))
                     for spec in specs}
    facts_by_node["spark-02"] = NodeFacts(mem_total_kb=small, mem_available_kb=int(0.81 * small))
    memory = load_engine(rehearsal_inventory.path, "sglang").serving.memory_fraction
    assert gates.memory_problems(specs, facts_by_node, memory) == []
    facts_by_node["spark-05"] = NodeFacts(mem_total_kb=large, mem_available_kb=int(0.79 * large))
    assert gates.memory_problems(specs, facts_by_node, memory) == [
        "spark-05: MemAvailable 96.2 GiB < 97.4 GiB (--mem-fraction-static 0.8 of 121.7 GiB)"]
