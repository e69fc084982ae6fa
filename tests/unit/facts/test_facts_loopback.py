"""Facts over real SSH (a loopback sshd): one round trip per node for status (the head's
records included) and for onboarding's baseline."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from loopback import Sshd, inventory, needs_sshd

from sparkrack.fleet import Fleet
from sparkrack.onboard import baseline
from sparkrack.status.rows import rack_status

pytestmark = needs_sshd

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def counting(monkeypatch) -> list[dict]:
    """Every Fleet.run's commands, recorded."""
    calls: list[dict] = []
    real = Fleet.run

    def run(self, commands, *args, **kwargs):
        calls.append(commands if isinstance(commands, dict) else
                     {n.name: commands for n in self.nodes})
        return real(self, commands, *args, **kwargs)

    monkeypatch.setattr(Fleet, "run", run)
    return calls


def test_status_asks_each_node_once_and_the_head_for_its_records(sshd: Sshd, monkeypatch):
    calls = counting(monkeypatch)
    rows, records = rack_status(inventory(sshd, ("spark-01", "spark-02", "spark-04")))
    assert len(calls) == 1 and set(calls[0]) == {"spark-01", "spark-02", "spark-04"}
    assert len(calls[0]["spark-01"]) > len(calls[0]["spark-02"])  # the head: + its records
    by_node = {r.node: r for r in rows}
    assert by_node["spark-04"].reachable == "unreachable" and by_node["spark-04"].facts is None
    for name in ("spark-01", "spark-02"):
        facts = by_node[name].facts
        assert (facts.hostname, facts.boot_id) == (socket.gethostname(), BOOT_ID)
        assert facts.mem_total_kb > 0
    # read from this machine
    assert set(records) == {"current", "last-good", "failed", "power-cycle", "nccl"}


def test_onboarding_baseline_is_one_round_trip_per_node(sshd: Sshd, monkeypatch):
    rack = inventory(sshd, ("spark-01", "spark-02"), nccl_socket_ifname="lo")
    calls = counting(monkeypatch)
    with Fleet(rack) as fleet:
        found = baseline.gather(fleet, rack.nodes)
    assert len(calls) == 1 and set(calls[0]) == {"spark-01", "spark-02"}
    for facts in found.values():
        assert facts.ok and facts.hostname == socket.gethostname()
        assert facts.netdevs["lo"].mtu == 65536 and facts.skew_s is not None
        assert set(facts.hcas) == set(rack.vars.nccl_ib_hca)


def with_records(monkeypatch, folder: Path, **found: dict) -> None:
    """The head's deployment records in folder ({kind: record}) instead of /var/lib."""
    import json

    from sparkrack.deployments import record
    from sparkrack.facts import records

    monkeypatch.setattr(records, "RECORD_DIR", str(folder))
    monkeypatch.setattr(record, "RECORD_DIR", str(folder))
    for kind, data in found.items():
        (folder / f"{kind.replace('_', '-')}.json").write_text(json.dumps(data))


def deployment(name: str, **fields) -> dict:
    return {"engine": "sglang", "profile": "512k", "deployment_id": name, "spec_hash": "s",
            "image": "i", "image_id": "sha256:x", **fields}


def test_the_gates_ask_each_node_once_and_the_head_for_its_records(sshd: Sshd, monkeypatch,
                                                                      tmp_path):
    from sparkrack.lifecycle.gates import Preflight, gather_facts_and_env
    from sparkrack.provision.envfiles import EnvFiles

    with_records(monkeypatch, tmp_path, current=deployment("old"),
                 last_good=deployment("good"))
    rack = inventory(sshd, ("spark-01", "spark-02"))
    report = Preflight()
    with Fleet(rack) as fleet:
        calls = counting(monkeypatch)
        gather_facts_and_env(fleet, EnvFiles(rack, "sglang"), report)
    assert len(calls) == 1 and set(calls[0]) == {"spark-01", "spark-02"}
    assert len(calls[0]["spark-01"]) > len(calls[0]["spark-02"])  # the head: + its records
    assert report.facts["spark-02"].boot_id == BOOT_ID and set(report.env) == set(report.facts)
    assert report.records["current"].deployment_id == "old"
    assert report.records["last-good"].deployment_id == "good" and report.records["failed"] is None


def stopping_one_rank(monkeypatch,
                      stop_ranks=lambda fleet, ranks, timeout, on_stop, head_timeout: {}):
    """stop.engine_containers finds rank 0 of d1 on spark-01; stop.stop_ranks is stop_ranks."""
    from sparkrack.deployments.ranks import Rank
    from sparkrack.lifecycle import stop

    rank = Rank("spark-01", 0, "sparkrack-rank0", "sglang", "512k", "d1", "running", None, 10)
    monkeypatch.setattr(stop, "engine_containers", lambda fleet: ([rank], {}))
    monkeypatch.setattr(stop, "stop_ranks", stop_ranks)


def test_down_clears_the_record_then_waits_for_the_memory_it_recorded(sshd: Sshd, monkeypatch,
                                                                       tmp_path):
    from sparkrack.lifecycle import lanes

    huge = 1 << 40  # kB: MemAvailable never comes back to that
    with_records(monkeypatch, tmp_path, current=deployment(
        "d1", mem_available_kb_before={"spark-01": huge, "spark-02": 0}))
    stopping_one_rank(monkeypatch)
    monkeypatch.setattr(lanes, "RECOVERY_TIMEOUT", 0)
    noted = []
    monkeypatch.setattr(lanes, "note", lambda **changed: noted.append(changed))
    rack = inventory(sshd, ("spark-01", "spark-02"))
    calls = counting(monkeypatch)
    stopped = lanes.down(rack)
    # the records, their clear, memory, and break-glass records to move to the head's log
    assert [sorted(c) for c in calls] == [["spark-01"], ["spark-01"], ["spark-01", "spark-02"],
                                          ["spark-01", "spark-02"]]
    assert calls[1]["spark-01"][:2] == ["rm", "-f"] and not (tmp_path / "current.json").exists()
    assert stopped.current.deployment_id == "d1" and noted[0]["stopped"] == "d1"
    assert list(stopped.not_recovered) == ["spark-01"]  # held to the record's figure
    assert stopped.not_recovered["spark-01"].endswith(
        f"expected {(huge - (1 << 20)) / 2**20:.1f} GiB")


def test_ctrl_c_during_down_waits_for_the_stop_and_the_record_then_skips_the_memory_wait(
        sshd: Sshd, monkeypatch, tmp_path):
    """Chaos seed 2, step 21: Ctrl-C in `down` left `current` naming a group that was gone."""
    import os
    import signal

    from sparkrack.lifecycle import lanes

    def interrupted_stop(fleet, ranks, timeout, on_stop, head_timeout):
        os.kill(os.getpid(), signal.SIGINT)  # the operator's Ctrl-C, mid-stop
        return {}

    with_records(monkeypatch, tmp_path, current=deployment("d1"))
    stopping_one_rank(monkeypatch, interrupted_stop)
    rack = inventory(sshd, ("spark-01", "spark-02"))
    calls = counting(monkeypatch)
    events: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        lanes.down(rack, on_event=events.append)
    assert not (tmp_path / "current.json").exists()
    assert [sorted(c) for c in calls] == [["spark-01"], ["spark-01"]]  # read, clear; no wait
    assert events[-1] == ("SIGINT arrived while the group stopped: it stopped whole and its "
                          "record was cleared first; the memory wait is skipped")


def test_restart_reads_boot_ids_from_the_node_facts_and_the_heads_records_with_them(
        sshd: Sshd, monkeypatch, tmp_path):
    from sparkrack.lifecycle.restart import boot_ids

    with_records(monkeypatch, tmp_path, last_good=deployment("good"))
    rack = inventory(sshd, ("spark-01", "spark-02", "spark-03"))
    calls = counting(monkeypatch)
    with Fleet(rack) as fleet:
        workers, none = boot_ids(fleet, rack.nodes[1:], "spark-01")
        everyone, records = boot_ids(fleet, rack.nodes, "spark-01")
    assert workers == {"spark-02": BOOT_ID, "spark-03": BOOT_ID} and none == {}
    assert everyone["spark-01"] == BOOT_ID and records["last-good"].deployment_id == "good"
    assert len(calls) == 2 and len(calls[1]["spark-01"]) > len(calls[1]["spark-02"])
