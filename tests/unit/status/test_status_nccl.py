"""`invoke status`'s line of what the running deployment's NCCL uses (issue 56, item 1),
from the record the last start wrote (lifecycle/ncclcheck.record_of)."""

from sparkrack.lifecycle import ncclcheck
from sparkrack.logs.nccluse import NcclUse
from sparkrack.status.view import nccl_line

BOTH = NcclUse("IB", ("rocep1s0f0:1", "roceP2p1s0f0:1"))
ONE = NcclUse("IB", ("rocep1s0f0:1",))
DEGRADED = ("rank 2 on spark-03 runs NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where "
            "the inventory gives it rocep1s0f0, roceP2p1s0f0: ...")


def uses(**odd):
    return {(rank, f"spark-0{rank + 1}"): odd.get(f"r{rank}", BOTH) for rank in range(8)}


def test_status_shows_each_degraded_rank_and_what_the_others_use():
    record = ncclcheck.record_of("d1", uses(r2=ONE), [DEGRADED], allowed=True)
    assert [r["degraded"] for r in record["ranks"]] == [False, False, True] + [False] * 5
    assert nccl_line(record, {"deployment_id": "d1"}) == (
        "nccl: rank 2 on spark-03: NET/IB on rocep1s0f0:1 (DEGRADED: fewer rails than "
        "nccl_ib_hca, started with --allow-degraded); the other 7: NET/IB on rocep1s0f0:1, "
        "roceP2p1s0f0:1")
    healthy = ncclcheck.record_of("d2", uses(), [], allowed=False)
    assert nccl_line(healthy, {"deployment_id": "d2"}) == (
        "nccl: every rank: NET/IB on rocep1s0f0:1, roceP2p1s0f0:1")
    assert nccl_line(healthy, {"deployment_id": "d1"}) is None  # another deployment's
    assert nccl_line(None, {"deployment_id": "d2"}) is None


def test_status_shows_a_port_gone_down_under_a_rank_since_the_start():
    """A cable out while serving: the record says both rails (what NCCL said at init), the
    node's port says DOWN now. status names the rank on one rail now and what NCCL does;
    a port missing from the round trip (the node did not answer) changes nothing."""
    record = ncclcheck.record_of("d1", uses(), [], allowed=False)
    down = {"spark-03": {"rocep1s0f0": "4: ACTIVE", "roceP2p1s0f0": "1: DOWN"}}
    assert nccl_line(record, {"deployment_id": "d1"}, down) == (
        "nccl: rank 2 on spark-03: NET/IB on rocep1s0f0:1, roceP2p1s0f0:1 (DEGRADED now: the "
        "port of roceP2p1s0f0 is down (1: DOWN), 1 of 2 rails; NCCL fails that rail once the "
        "HCA's retries are spent (about 34 s) and the group with it: reseat the cable); the "
        "other 7: NET/IB on rocep1s0f0:1, roceP2p1s0f0:1")
    gone = {"spark-03": {"rocep1s0f0": "4: ACTIVE", "roceP2p1s0f0": ""}}
    assert "the port of roceP2p1s0f0 is down (no such device)" in nccl_line(
        record, {"deployment_id": "d1"}, gone)
    healthy = {f"spark-0{n}": {"rocep1s0f0": "4: ACTIVE", "roceP2p1s0f0": "4: ACTIVE"}
               for n in range(1, 9)}
    assert nccl_line(record, {"deployment_id": "d1"}, healthy) == (
        "nccl: every rank: NET/IB on rocep1s0f0:1, roceP2p1s0f0:1")
    assert nccl_line(record, {"deployment_id": "d1"}, {}) == (
        "nccl: every rank: NET/IB on rocep1s0f0:1, roceP2p1s0f0:1")
