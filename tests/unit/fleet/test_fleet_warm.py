"""Warm connections (fleet_warm) against the loopback sshd: opened ahead and handed over
once, never handed over when they failed, closed when nobody claims them; a lent connection
is used by other fleets and left open by them."""

from __future__ import annotations

import pytest
from loopback import Sshd, inventory, needs_sshd

from sparkrack.fleet import Fleet
from sparkrack.fleet import warm as fleet_warm

pytestmark = needs_sshd


@pytest.fixture(autouse=True)
def nothing_pending():
    fleet_warm.discard()
    yield
    fleet_warm.discard()


def opened_ahead(rack) -> dict:
    """{node name: the connection prewarm opened} (waiting for them)."""
    with fleet_warm._guard:
        pending = dict(fleet_warm._pending)
    return {key[0]: future.result(timeout=10) for key, future in pending.items()}


def test_a_fleet_claims_the_warm_connection_and_it_is_its_alone(sshd: Sshd):
    rack = inventory(sshd, ("spark-01", "spark-02"))
    fleet_warm.prewarm(rack, rack.nodes)
    warm = opened_ahead(rack)
    assert sorted(warm) == ["spark-01", "spark-02"]
    with Fleet(rack) as fleet:
        assert [r.status for r in fleet.run(["true"])] == ["ok", "ok"]
        assert all(fleet._connections[name] is warm[name] for name in warm)
        with Fleet(rack) as second:  # handed over once: the next fleet opens its own
            assert second.run(["true"]).summary() == "2 ok"
            assert second._connections["spark-01"] is not warm["spark-01"]
    assert not any(connection.is_connected for connection in warm.values())  # closed with it


def test_a_connection_that_failed_to_open_is_not_handed_over(sshd: Sshd):
    unknown = inventory(sshd, ("spark-04",))  # its host key is not in known_hosts
    fleet_warm.prewarm(unknown, unknown.nodes)
    assert fleet_warm.claim(unknown.nodes[0], unknown.known_hosts_path) is None
    with Fleet(unknown) as fleet:  # the fleet's own attempt names the reason
        result = fleet.run(["true"])
    assert result["spark-04"].status == "unreachable"
    assert "spark-04" in result["spark-04"].error


def test_discard_closes_what_nobody_claimed(sshd: Sshd):
    rack = inventory(sshd, ("spark-01",))
    fleet_warm.prewarm(rack, rack.nodes)
    warm = opened_ahead(rack)["spark-01"]
    assert warm.is_connected
    fleet_warm.discard()
    assert not warm.is_connected
    assert fleet_warm.claim(rack.nodes[0], rack.known_hosts_path) is None


def test_a_lent_connection_is_borrowed_and_left_open(sshd: Sshd):
    rack = inventory(sshd, ("spark-01",))
    with Fleet(rack) as owner:
        owner.run(["true"])
        lent = owner._connections["spark-01"]
        owner.lend("spark-01")
        try:
            with Fleet(rack) as borrower:
                assert borrower.run(["echo", "hi"])["spark-01"].stdout == "hi\n"
                assert borrower._connections["spark-01"] is lent
            assert lent.is_connected  # the borrower left it open
            with Fleet(rack, borrow=False) as own:  # a second lock's: never the lent one,
                own.run(["true"])  # which closes when its owner releases
                assert own._connections["spark-01"] is not lent
            assert owner.run(["true"])["spark-01"].status == "ok"
        finally:
            fleet_warm.unlend(rack.nodes[0], rack.known_hosts_path)
        with Fleet(rack) as own:  # no longer lent: a connection of its own
            own.run(["true"])
            assert own._connections["spark-01"] is not lent
