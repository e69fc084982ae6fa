"""The watchdog's power cycle (watchdog/nodecycle.py) under a real rack lock and audit log on
a loopback "head" (sshd on 127.0.0.1): the PDU, the node's boot and the start are stood in
for. A cycle of another node is one record in one process; a cycle of its own node is one
record across the process that cut its power and the one that finishes after the boot."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from loopback import inventory, needs_sshd

from sparkrack.inventory.pdu import PduConfig
from sparkrack.lifecycle import lanes
from sparkrack.lifecycle.powercycle import CyclePlan
from sparkrack.oplock import audit
from sparkrack.oplock import lock as lock_module
from sparkrack.watchdog import nodecycle

pytestmark = needs_sshd
NAMES = ("spark-01", "spark-02")


class PowerGone(BaseException):
    """The process's own node lost its power."""


@pytest.fixture
def loop_rack(sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """spark-01 (the head) and spark-02 on loopback, each on its PDU outlet; the lock and
    the audit log in a folder of the test; the PDU's cut, the boot and the start faked:
    what was told to the head's power-cycle record and what was started are kept."""
    monkeypatch.setenv("SPARKRACK_LOCK_DIR", str(tmp_path / "head"))
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("sparks: {}\n")
    made = inventory(sshd, NAMES, path=tmp_path / "inv", connect_timeout=1.0,
                     pdu=PduConfig("strip-a", "127.0.0.9", (("spark-01", 1), ("spark-02", 2))))
    seen = SimpleNamespace(told=[], started=[], events=[])
    monkeypatch.setattr(nodecycle, "write_power_cycle",
                        lambda fleet, inventory, data: seen.told.append(dict(data)))
    monkeypatch.setattr(nodecycle, "plan_cycle", lambda inventory, node, off, fleet: CyclePlan(
        node.name, "strip-a", NAMES.index(node.name) + 1, off, "sglang 512k (d1)",
        ["rank 0 on spark-01", "rank 1 on spark-02"]))
    monkeypatch.setattr(nodecycle, "wait_back", lambda *args: {})
    monkeypatch.setattr(nodecycle, "burned", lambda inventory, node: (
        f"{node.name}: back, cap unit active this boot, burn ok: max 2184 MHz"))

    def up(inventory, engine, profile, **options):
        seen.started.append((engine, profile))
        audit.note(deployment="d2")
        return SimpleNamespace(deployment_id="d2")

    monkeypatch.setattr(lanes, "up", up)
    before = list(lock_module._held)
    yield made, seen
    lock_module._held[:] = before


def cut(own_power: bool):
    """The group stopped and the outlet cut, as lifecycle.powercycle.power_cycle does;
    own_power: the process's own node goes dark at the cut."""
    def power_cycle(inventory, node, plan, *, on_event, before_cut, away, silent=False):
        audit.note(stopped="d1", containers=["sparkrack-sglang-rank0@spark-01"])
        before_cut("boot-before")
        audit.note(nodes=[node.name], power_cycled=[node.name],
                   outlets=[f"{plan.pdu}:{plan.outlet}"])
        cut.away, cut.silent = away, silent
        if own_power:
            raise PowerGone(node.name)
        return f"{node.name}: back, cap unit active this boot, burn ok: max 2184 MHz"
    return power_cycle


def entries(tmp_path: Path) -> list[dict]:
    return audit.merge(audit.parse_lines((tmp_path / "head" / "audit.jsonl").read_text()))


def test_a_cycle_of_another_node_is_one_record_and_starts_the_group(loop_rack, tmp_path,
                                                                  monkeypatch):
    inventory_, seen = loop_rack
    monkeypatch.setattr(nodecycle, "power_cycle", cut(own_power=False))
    kept = []
    done = nodecycle.cycle_node(inventory_, "spark-02", "latched",
                                SimpleNamespace(engine="sglang", profile="512k",
                                                deployment_id="d1"),
                                own="spark-01", keep=kept.append, say=seen.events.append)
    assert done.ok and (done.cut, done.started, done.restarted) == (True, True, "d2")
    assert done.line.endswith("burn ok: max 2184 MHz; sglang 512k started again in order")
    assert cut.away == []  # the lock's keeper stays up
    [pending] = kept
    assert (pending.node, pending.boot_id, pending.outlet, pending.deployment) == (
        "spark-02", "boot-before", "strip-a:2", "d1")
    [record] = entries(tmp_path)
    assert record["task"] == "watchdog.power-cycle" and record["outcome"] == "ok"
    assert record["changed"]["restarted"] == "d2" and record["changed"]["stopped"] == "d1"
    assert [t["outcome"] for t in seen.told] == ["in progress", "ok"]
    assert seen.told[-1]["by"] == "the watchdog" and seen.told[-1]["restarted"] == "d2"
    assert not (tmp_path / "head" / "lock.json").exists()


def test_a_cycle_of_its_own_node_is_one_record_across_the_boot(loop_rack, tmp_path, monkeypatch):
    inventory_, seen = loop_rack
    monkeypatch.setattr(nodecycle, "power_cycle", cut(own_power=True))
    kept = []
    with pytest.raises(PowerGone):
        nodecycle.cycle_node(inventory_, "spark-01", "latched",
                             SimpleNamespace(engine="sglang", profile="512k",
                                             deployment_id="d1"),
                             own="spark-01", keep=kept.append, say=seen.events.append,
                             by="the watchdog on spark-01")
    assert cut.away == ["spark-01"]  # its own power goes: the lock is leased meanwhile
    dead = lock_module.held()  # the process ends here: no heartbeat, no local lock, no end
    dead._stop.set()
    dead._release_local()
    lock_module._held.remove(dead)
    [pending] = kept
    assert pending.changed["stopped"] == "d1"  # what its record noted before the cut
    assert [t["outcome"] for t in seen.told] == ["in progress"]
    # after the boot: the service finds the pending restart and finishes it
    done = nodecycle.finish(inventory_, pending, say=seen.events.append,
                            by="the watchdog on spark-01")
    assert done.ok and (done.started, done.restarted) == (True, "d2"), done.line
    assert seen.started == [("sglang", "512k")]
    assert "resuming the power cycle of spark-01 (latched), outlet strip-a:1 cut; sglang " \
           "512k to start again" in seen.events
    lines = audit.parse_lines((tmp_path / "head" / "audit.jsonl").read_text())
    assert [(line["id"], line["phase"]) for line in lines] == [(pending.token, "start"),
                                                              (pending.token, "end")]
    [record] = entries(tmp_path)
    assert record["outcome"] == "ok" and record["lock"]["resumed"] is True
    changed = record["changed"]
    assert (changed["stopped"], changed["power_cycled"], changed["outlets"]) == (
        "d1", ["spark-01"], ["strip-a:1"])
    assert changed["restarted"] == "d2" and changed["resumed"] is True
    assert [t["outcome"] for t in seen.told] == ["in progress", "ok"]
    assert seen.told[-1]["line"].endswith("sglang 512k started again in order")


def test_a_resume_that_finds_the_lock_taken_says_so_and_starts_nothing(loop_rack, tmp_path,
                                                                     monkeypatch):
    from sparkrack.oplock.guard import Guard

    inventory_, seen = loop_rack
    monkeypatch.setattr(nodecycle, "power_cycle", cut(own_power=True))
    kept = []
    with pytest.raises(PowerGone):
        nodecycle.cycle_node(inventory_, "spark-01", "latched",
                             SimpleNamespace(engine="sglang", profile="512k",
                                             deployment_id="d1"),
                             own="spark-01", keep=kept.append, say=seen.events.append)
    dead = lock_module.held()
    dead._stop.set()
    dead._release_local()
    lock_module._held.remove(dead)
    Path(tmp_path / "head" / "lock.json").unlink()  # its lease ran out; an operator took it
    operator = Guard(inventory_, "up", {}, on_lost=lambda: None)
    operator.begin()
    try:
        monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state-b"))
        done = nodecycle.finish(inventory_, kept[0], say=seen.events.append)
    finally:
        operator.end("ok")
    assert not done.ok and done.cut and done.started is None
    assert done.line.startswith("spark-01: power-cycled, not finished: the rack lock is held "
                                "by ")
    assert done.line.endswith("; start the group yourself (`invoke up`)")
    assert seen.started == [] and seen.told[-1]["outcome"] == "failed"
