"""The rails gate (issue 56, item 1): what each rank's NCCL will use on its node, judged
before any rank starts; NCCL 2.27.7 skips an entry that matches no device and a port that
is down without an error, and falls back to TCP with none left."""

from dataclasses import replace
from pathlib import Path

from sparkrack.facts.roce import Function
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle.railgate import nccl_selects, rail_line

REPO = Path(__file__).resolve().parents[3]
NETDEVS = {"rocep1s0f0": "enp1s0f0np0", "rocep1s0f1": "enp1s0f1np1",
           "roceP2p1s0f0": "enP2p1s0f0np0", "roceP2p1s0f1": "enP2p1s0f1np1"}


def devices(*up: str) -> dict[str, Function]:
    return {name: Function(name, (netdev,), "4: ACTIVE" if name in up else "1: DOWN")
            for name, netdev in NETDEVS.items()}


def test_nccl_ib_hca_selects_as_nccl_matches_it():
    names = list(NETDEVS)
    assert nccl_selects("rocep1s0f0,roceP2p1s0f0", names) == ["rocep1s0f0", "roceP2p1s0f0"]
    assert nccl_selects("rocep1s0f", names) == ["rocep1s0f0", "rocep1s0f1"]  # a prefix
    assert nccl_selects("=rocep1s0f", names) == []
    assert nccl_selects("^rocep1s0f0", names) == ["rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]
    assert nccl_selects("rocep1s0f0:1", names) == ["rocep1s0f0"]
    assert nccl_selects("", names) == names


def test_a_misnamed_entry_a_down_port_and_none_left_each_name_the_rank_and_the_fix():
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    node = inventory.node("spark-03")
    assert rail_line(node, {}, devices("rocep1s0f0", "roceP2p1s0f0")) is None
    typo = replace(node, vars=replace(node.vars, nccl_ib_hca=("rocep1s0f0", "rocep2p1s0f0")))
    assert rail_line(typo, {"NCCL_IB_HCA": "rocep1s0f0,rocep2p1s0f0"},
                     devices("rocep1s0f0", "roceP2p1s0f0")) == (
        "rank 2 on spark-03 would run NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where the "
        "inventory gives it rocep1s0f0, rocep2p1s0f0: spark-03 has no HCA rocep2p1s0f0 (its "
        "RDMA devices: rocep1s0f0, rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1), and NCCL skips it "
        "without an error: about 1/2 of the bandwidth; `invoke run --limit spark-03 -- "
        "ibdev2netdev` shows its HCAs and their ports; fix nccl_ib_hca in "
        "host_vars/spark-03.yml and `invoke provision --limit spark-03` (up on spark-03: "
        "rocep1s0f0 (enp1s0f0np0); roceP2p1s0f0 (enP2p1s0f0np0); if it is cabled there, set in "
        "host_vars/spark-03.yml: nccl_ib_hca: [rocep1s0f0, roceP2p1s0f0], nccl_socket_ifname: "
        "enp1s0f0np0); --allow-degraded starts it anyway")
    twin_down = rail_line(node, {}, devices("rocep1s0f0"))
    assert twin_down.startswith(
        "rank 2 on spark-03 would run NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where the "
        "inventory gives it rocep1s0f0, roceP2p1s0f0: the port of roceP2p1s0f0 is down, and "
        "NCCL skips it without an error: about 1/2 of the bandwidth;"), twin_down
    assert "reseat the cable, or set nccl_ib_hca in host_vars/spark-03.yml" in twin_down
    none = rail_line(node, {"NCCL_SOCKET_IFNAME": "enP7s7"}, devices())
    assert none.startswith(
        "rank 2 on spark-03 would run NCCL over NET/Socket (TCP) on enP7s7 where the inventory "
        "gives it NET/IB on rocep1s0f0, roceP2p1s0f0: the ports of rocep1s0f0, roceP2p1s0f0 "
        "are down, and NCCL skips them without an error and falls back to TCP;"), none
    assert none.endswith("--allow-degraded starts it anyway")
