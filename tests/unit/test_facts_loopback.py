"""Facts over real SSH (a loopback sshd): one round trip per node for status (the head's
records included) and for onboarding's baseline."""

from __future__ import annotations

import socket
from pathlib import Path

from loopback import Sshd, inventory, needs_sshd

from sparkrack.fleet import Fleet
from sparkrack.onboard import baseline
from sparkrack.status import rack_status

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
    assert set(records) == {"current", "last-good", "failed"}  # read from this machine


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
