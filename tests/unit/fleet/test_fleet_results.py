"""Aggregating per-node results, and what the fleet refuses before touching any node."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sparkrack.core.errors import UnsafeAddressError, UsageError
from sparkrack.fleet import Fleet, FleetError, FleetResult, NodeResult
from sparkrack.inventory import load_inventory

REPO = Path(__file__).resolve().parents[3]

RESULT = FleetResult((
    NodeResult("spark-01", "ok", 0, "a\n"),
    NodeResult("spark-02", "failed", 2, error="spark-02 (10.77.1.12): `false` exited 2"),
    NodeResult("spark-03", "ok", 0),
    NodeResult("spark-04", "unreachable",
               error="spark-04 (10.77.1.14): connection refused on port 22 (is sshd running?)"),
))


def test_results_keep_rank_order_and_index_by_name():
    assert [r.node for r in RESULT] == ["spark-01", "spark-02", "spark-03", "spark-04"]
    assert len(RESULT) == 4 and "spark-03" in RESULT and "spark-09" not in RESULT
    assert RESULT["spark-01"].stdout == "a\n"
    with pytest.raises(KeyError):
        RESULT["spark-09"]


def test_results_split_by_status():
    assert [r.node for r in RESULT.ok] == ["spark-01", "spark-03"]
    assert [r.node for r in RESULT.failed] == ["spark-02"]
    assert [r.node for r in RESULT.unreachable] == ["spark-04"]
    assert not RESULT.all_ok
    assert RESULT.summary() == "2 ok, 1 failed (spark-02), 1 unreachable (spark-04)"
    assert FleetResult((NodeResult("spark-01", "ok"),)).summary() == "1 ok"


def test_raise_for_failures_names_every_problem_in_one_line():
    with pytest.raises(FleetError) as caught:
        RESULT.raise_for_failures()
    assert caught.value.result is RESULT
    assert caught.value.line() == (
        "2 of 4 nodes not ok: spark-02 (10.77.1.12): `false` exited 2; spark-04 (10.77.1.14): "
        "connection refused on port 22 (is sshd running?)")
    FleetResult(RESULT.ok).raise_for_failures()  # nothing to raise


def test_the_example_inventory_is_refused_before_any_packet(monkeypatch: pytest.MonkeyPatch):
    def no_connect(*args: object, **kwargs: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket, "create_connection", no_connect)
    with Fleet(load_inventory(REPO / "inventory" / "rack")) as fleet:
        with pytest.raises(UnsafeAddressError) as caught:
            fleet.run(["true"])
        with pytest.raises(UnsafeAddressError):
            fleet.docker_client("spark-02")
    assert caught.value.line() == (
        "spark-01 (192.0.2.11): the address is an example from the inventory (put your node's "
        "real address in the inventory's hosts.yml)")


def test_unknown_nodes_and_bad_argv_are_usage_errors():
    inventory = load_inventory(REPO / "inventory" / "rack")
    with Fleet(inventory, inventory.select("spark-01,spark-02")) as fleet:
        with pytest.raises(UsageError, match="not in this fleet: spark-03"):
            fleet.run({"spark-03": ["true"]})
        with pytest.raises(UsageError, match="not in this fleet: spark-09"):
            fleet.get({"spark-09": ["/etc/hostname"]})
        with pytest.raises(ValueError):
            fleet.run("uname -a")
