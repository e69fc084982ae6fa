"""Two rehearsal racks on one machine: rack 1 keeps its names and addresses; a second one
gets its own (layout.RACKS)."""

from pathlib import Path

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.fleet.netguard import REHEARSAL_SUBNET
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.layout import RACKS, NodeLayout
from sparkrack.rehearsal.rack import RehearsalRack

REPO = Path(__file__).resolve().parents[3]


def names(node: NodeLayout) -> tuple:
    return (node.netns, node.host_veth, node.fabric_veth(0, "a"), str(node.state),
            str(node.run), [str(p) for p in node.cgroups()], node.roce_addr, node.twin_addr)


def test_rack_one_keeps_todays_names_and_addresses():
    rack = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal"))
    node = rack.nodes[0]
    assert names(node) == (
        "sr-spark-01", "srv11", "srf11-0a", "/var/lib/sparkrack/rehearsal/nodes/spark-01",
        "/run/sparkrack-rehearsal/spark-01",
        ["/sys/fs/cgroup/systemd/sparkrack-rehearsal/spark-01",
         "/sys/fs/cgroup/unified/sparkrack-rehearsal/spark-01"], "10.77.3.11", "10.77.4.11")
    assert names(node) == names(NodeLayout("spark-01", "10.77.1.11"))  # the default rack
    one = RACKS[1]
    assert (one.bridge, one.bridge_addr, one.pdu_addr, one.fabric_bridge) == \
        ("srbr0", "10.77.1.254/24", "10.77.1.2", "srfab0")
    assert str(one.state_file) == "/run/sparkrack-rehearsal/rack.json"


def test_the_second_rack_has_its_own_everything_inside_the_rehearsal_subnet():
    rack = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal-2"))
    assert rack.layout is RACKS[2] and [n.name for n in rack.nodes][0] == "spark-11"
    first = {tuple(map(str, names(n))) for n in
             RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal")).nodes}
    for node in rack.nodes:
        assert not set(map(str, names(node))) & {v for row in first for v in row}
        assert len(node.host_veth) <= 15 and len(node.fabric_veth(1, "b")) <= 15  # IFNAMSIZ
    two = RACKS[2]
    assert two.mgmt_subnet.subnet_of(REHEARSAL_SUBNET) and two.fabric_subnet.subnet_of(
        REHEARSAL_SUBNET)
    assert (two.bridge, two.fabric_bridge, two.cgroup_group) == \
        ("srbr2", "srfab2", "sparkrack-rehearsal-2")
    assert two.known_hosts == Path("/var/lib/sparkrack/rehearsal-2/ssh/known_hosts")


def test_a_node_outside_its_racks_subnet_is_refused(tmp_path):
    from provision_helpers import inventory_copy

    inventory = inventory_copy(REPO / "inventory" / "rehearsal", tmp_path / "r",
                               rehearsal_rack=2)  # rack 1's addresses under rack 2
    with pytest.raises(UsageError) as caught:
        RehearsalRack(inventory)
    assert "spark-01 address 10.77.1.11 is outside rehearsal rack 2's subnet " \
           "10.77.11.0/24" in caught.value.line()
