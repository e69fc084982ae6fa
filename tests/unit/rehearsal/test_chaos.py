"""The chaos run's pure parts: the same seed gives the same steps; the invariants' judge
finds each kind of violation in a made-up rack state, and none in a healthy one."""

from sparkrack.deployments.ranks import Rank
from sparkrack.facts.node import NodeFacts
from sparkrack.rehearsal.chaos.invariants import Observed, judge
from sparkrack.rehearsal.chaos.plan import FAULTS, OPS, steps

NODES = [f"spark-0{i}" for i in range(1, 9)]


def test_a_seed_gives_the_same_steps_and_another_seed_others():
    assert steps(7, 40, NODES) == steps(7, 40, NODES)
    assert steps(7, 40, NODES) != steps(8, 40, NODES)
    assert steps(7, 10, NODES) == steps(7, 40, NODES)[:10]  # --until K replays a prefix


def test_steps_use_every_operation_and_fault_over_a_long_run():
    many = steps(1, 400, NODES)
    assert {s.op for s in many} == {op for op, _ in OPS}
    assert {s.fault.kind for s in many if s.fault} == {kind for kind, _ in FAULTS}
    for step in many:
        if step.op == "reboot":  # two workers, never the head
            assert len(step.nodes) == 2 and "spark-01" not in step.nodes
        if step.fault and step.fault.kind in ("sigint", "second_operator"):
            assert step.fault.node is None
        if step.fault and step.fault.kind == "head_lost":
            assert step.fault.node == "spark-01"


def _rank(node, rank, deployment="d1", status="running"):
    return Rank(node=node, rank=rank, name=f"r{rank}", engine="sglang", profile="512k",
                deployment=deployment, status=status, exit_code=None, stop_timeout=10)


def _healthy(**changes) -> Observed:
    facts = {n: NodeFacts(boot_id="b", burn={"boot_id": "b", "ok": True}) for n in NODES}
    seen = Observed(facts=facts, ranks=[_rank(n, i) for i, n in enumerate(NODES)],
                    clock_locks={n: [0, 2200] for n in NODES}, current="d1",
                    audit=[{"task": "up", "ts": 100.0, "complete": True, "outcome": "ok"}])
    for key, value in changes.items():
        setattr(seen, key, value)
    return seen


def _judge(seen, whole=True, commands=(("up", 100.0),)):
    return judge(seen, cap_mhz=2200, nodes=NODES, whole=whole, commands=list(commands))


def test_a_healthy_serving_rack_and_an_idle_one_pass():
    assert _judge(_healthy()) == []
    assert _judge(_healthy(ranks=[], current=None)) == []


def test_each_violation_is_named():
    uncapped = _healthy(clock_locks={**{n: [0, 2200] for n in NODES}, "spark-03": None})
    assert _judge(uncapped) == ["capped: rank 2 runs on spark-03, whose GPU clock lock is "
                                "None (cap 2200 MHz)"]
    stale = {n: NodeFacts(boot_id="b", burn={"boot_id": "old", "ok": True}) for n in NODES}
    assert len(_judge(_healthy(facts=stale))) == 8
    partial = _healthy(ranks=[_rank(n, i) for i, n in enumerate(NODES) if n != "spark-05"])
    assert _judge(partial) == ["records: current is d1 but its group is not whole (no live "
                               "rank on spark-05)"]
    assert _judge(partial, whole=False) == []  # a fault hit a node: recovery's job
    orphan = _healthy(current=None)
    assert _judge(orphan)[0].startswith("records: orphan rank(s) outside the current record "
                                        "(unset): d1 (rank 0 on spark-01)")
    assert _judge(_healthy(lock_holder="alice@laptop (pid 4)")) == [
        "lock: still held after the step: alice@laptop (pid 4)"]
    assert _judge(_healthy(), commands=[("down", 200.0)]) == [
        "audit: no record with an outcome for `down` run at 200"]
    unended = _healthy(audit=[{"task": "up", "ts": 100.0, "complete": False,
                               "outcome": "interrupted"}])
    assert _judge(unended) == ["audit: no record with an outcome for `up` run at 100"]
    assert _judge(_healthy(inventory_problem="temporary files left in the inventory: "
                           ".hosts.yml.x1")) == [
        "inventory: temporary files left in the inventory: .hosts.yml.x1"]


def test_a_group_the_watchdog_stopped_keeps_its_record_and_a_dead_watchdog_is_named():
    stopped = [_rank(n, i, status="exited") for i, n in enumerate(NODES)]
    by_watchdog = {"task": "watchdog:stopped", "ts": 150.0, "complete": True, "outcome": "ok",
                   "args": {"deployment": "d1"}}
    audit = [*_healthy().audit, by_watchdog]
    assert _judge(_healthy(ranks=stopped, audit=audit)) == []  # by design: see its doc
    assert _judge(_healthy(ranks=stopped)) == [  # nobody stopped it: the record lies
        "records: current is d1 but its group is not whole (no live rank on "
        + ", ".join(NODES) + ")"]
    one_left = [*stopped[:-1], _rank(NODES[-1], 7)]  # a rank the watchdog has yet to stop
    assert _judge(_healthy(ranks=one_left, audit=audit))[0].startswith(
        "records: current is d1 but its group is not whole")
    assert _judge(_healthy(watchdog_problem="sparkrack-watchdog.service on spark-08 is "
                           "activating")) == [
        "watchdog: sparkrack-watchdog.service on spark-08 is activating"]
