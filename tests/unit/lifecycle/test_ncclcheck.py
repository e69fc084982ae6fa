"""What each rank's NCCL uses (issue 56, item 1): read from its INFO lines at init and
judged against the inventory; NCCL 2.27.7 skips an HCA entry or a down port in silence."""

from pathlib import Path

from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import ncclcheck
from sparkrack.logs.nccluse import NcclUse, nccl_use

REPO = Path(__file__).resolve().parents[3]
RANK2 = "spark-03:77:77 [0] NCCL INFO "
BOTH = [RANK2 + "NCCL_IB_HCA set to rocep1s0f0,roceP2p1s0f0",
        RANK2 + "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB "
                "enp1s0f0np0:10.77.3.13<0>",
        RANK2 + "NET/IB : GPU Direct RDMA Disabled for HCA 0 'rocep1s0f0'",
        RANK2 + "NET/IB : GPU Direct RDMA Disabled for HCA 1 'roceP2p1s0f0'",
        RANK2 + "Using network IB"]
ONE = [RANK2 + "NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:10.77.3.13<0>",
       RANK2 + "Using network IB"]
TCP = [RANK2 + "NET/IB : No device found.",
       RANK2 + "NET/Socket : Using [0]enp1s0f0np0:10.77.3.13<0>", RANK2 + "Using network Socket"]


def test_the_init_lines_say_the_network_the_hcas_and_gpudirect():
    use = nccl_use(["[2026-12-06 07:58:20 TP2] Init torch distributed ends.", *BOTH])
    assert use == NcclUse("IB", ("rocep1s0f0:1", "roceP2p1s0f0:1"), (),
                          {"rocep1s0f0": False, "roceP2p1s0f0": False})
    assert use.text() == "NET/IB on rocep1s0f0:1, roceP2p1s0f0:1"
    tcp = nccl_use(TCP)
    assert (tcp.network, tcp.hcas, tcp.sockets) == ("Socket", (), ("enp1s0f0np0 10.77.3.13",))
    assert tcp.text() == "NET/Socket (TCP) on enp1s0f0np0"
    assert not nccl_use(["no NCCL here"]).said
    assert nccl_use([*TCP, *BOTH]).network == "IB"  # a restart: the last init counts


def test_a_rank_on_fewer_rails_or_tcp_is_named_with_what_it_uses_and_the_fix():
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    uses = {(0, "spark-01"): nccl_use(BOTH), (2, "spark-03"): nccl_use(ONE),
            (5, "spark-06"): nccl_use(TCP), (7, "spark-08"): nccl_use([])}
    found = ncclcheck.degraded(inventory, uses)
    assert found == [
        "rank 2 on spark-03 runs NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where the "
        "inventory gives it rocep1s0f0, roceP2p1s0f0: NCCL skipped roceP2p1s0f0 without an "
        "error (no such device, or its port down), about 1/2 of the bandwidth; `invoke run "
        "--limit spark-03 -- ibdev2netdev` shows its HCAs and their ports: reseat the cable, "
        "or set nccl_ib_hca in host_vars/spark-03.yml and `invoke provision`; "
        "--allow-degraded starts it anyway",
        "rank 5 on spark-06 runs NCCL over NET/Socket (TCP) on enp1s0f0np0 where the "
        "inventory gives it NET/IB on rocep1s0f0, roceP2p1s0f0: NCCL found none of them with "
        "an active port and fell back to TCP without an error; `invoke run --limit spark-06 "
        "-- ibdev2netdev` shows its HCAs and their ports: reseat the cable, or set "
        "nccl_ib_hca in host_vars/spark-06.yml and `invoke provision`; --allow-degraded "
        "starts it anyway"]
    assert ncclcheck.silent(uses) == ["rank 7 on spark-08"]
    assert ncclcheck.degraded(inventory, {(0, "spark-01"): nccl_use(BOTH)}) == []
