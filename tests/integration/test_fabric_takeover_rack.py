"""NVIDIA's own netplan on a node (issue 45): the GID table holds a pair for every address,
role fabric takes the netdevs over, and NCCL's GID carries the node's roce_addr, before and
after a reboot. The node is put back as it was found (no 40-cx7.yaml, provisioned)."""

from __future__ import annotations

import ipaddress
import time

import pytest
from provision_helpers import failures

from sparkrack.engineenv import parse_env
from sparkrack.fleet import Fleet
from sparkrack.provision import provision

pytestmark = pytest.mark.rack
NODE = "spark-03"
PORT = "/sys/class/infiniband/rocep1s0f0/ports/1"
REPLACED = "/var/lib/sparkrack/netplan-replaced/40-cx7.yaml"


def ipv4_gids(fleet) -> dict[int, str]:
    """{index: IPv4 address} of the RoCE v2 IPv4-mapped entries of NODE's rocep1s0f0."""
    script = (f'cd {PORT}/gid_attrs/types && for i in *; do '
              f'[ "$(cat $i)" = "RoCE v2" ] && echo "$i $(cat {PORT}/gids/$i)"; done; true')
    out = fleet.run({NODE: ["sh", "-c", script]})[NODE].stdout
    found = {}
    for line in out.splitlines():
        index, gid = line.split()
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
        if mapped:
            found[int(index)] = str(mapped)
    return dict(sorted(found.items()))


def addresses(fleet, netdev="enp1s0f0np0") -> list[str]:
    out = fleet.run({NODE: ["ip", "-o", "-4", "addr", "show", "dev", netdev]})[NODE].stdout
    return [line.split()[3] for line in out.splitlines()]


def wait_for(what, check, seconds=40.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
        time.sleep(0.5)
    return value


@pytest.fixture(params=[("link-local", "169.254."), ("static", "10.77.5.")],
                ids=["link-local", "static"])
def nvidia_netplan(request, engine_rack, rack):
    """NODE booted with NVIDIA's 40-cx7.yaml in one of its forms (and the prefix of the
    address it adds to enp1s0f0np0); afterwards none, and provisioned."""
    form, prefix = request.param
    rack.cx7_netplan([NODE], form)
    yield engine_rack, prefix
    with Fleet(engine_rack, [engine_rack.node(NODE)]) as fleet:
        fleet.run({NODE: ["rm", "-rf", "/var/lib/sparkrack/netplan-replaced"]})
    rack.cx7_netplan([NODE], "none")
    assert provision(engine_rack, NODE).exit_code == 0


def test_nvidia_netplan_is_taken_over_and_nccl_uses_roce_addr(nvidia_netplan, rack):
    inventory, prefix = nvidia_netplan
    roce_addr = inventory.node(NODE).roce_addr
    with Fleet(inventory, [inventory.node(NODE)]) as fleet:
        # netplan merged both files: NVIDIA's address joins roce_addr, and the GID table
        # holds a pair for each
        wait_for(f"an address {prefix}*", lambda: any(
            a.startswith(prefix) for a in addresses(fleet)))
        gids = wait_for("two IPv4 GIDs", lambda: (g := ipv4_gids(fleet)) and len(g) == 2 and g)
        assert roce_addr in gids.values() and any(a.startswith(prefix) for a in gids.values())

        checked = provision(inventory, NODE, roles="fabric", check=True)
        take_over = next(c for c in checked.nodes[0].changes
                         if c.task.startswith("the fabric's netdevs carry exactly"))
        named = take_over.summary.split("/etc/netplan/40-cx7.yaml names ", 1)[-1].split(" (")[0]
        assert "enp1s0f0np0" in named.split(", "), take_over.summary
        assert prefix in take_over.summary and "is not the fabric's" in take_over.summary

        report = provision(inventory, NODE)
        assert report.exit_code == 0, failures(report)
        assert addresses(fleet) == [f"{roce_addr}/24"]
        gids = ipv4_gids(fleet)
        assert list(gids.values()) == [roce_addr]
        env = parse_env(fleet.run({NODE: ["cat", "/etc/sparkrack/nccl.env"]})[NODE].stdout)
        assert gids[int(env["NCCL_IB_GID_INDEX"])] == roce_addr
        kept = fleet.run({NODE: ["test", "-f", REPLACED]})[NODE]
        gone = fleet.run({NODE: ["test", "-e", "/etc/netplan/40-cx7.yaml"]})[NODE]
        assert kept.exit_code == 0 and gone.exit_code == 1

    rack.reboot(NODE)  # after a reboot: exactly roce_addr, its GID where NCCL looks
    with Fleet(inventory, [inventory.node(NODE)]) as fleet:
        wait_for("roce_addr's GID", lambda: roce_addr in ipv4_gids(fleet).values())
        time.sleep(3)  # IPv4LL would have claimed an address by now
        assert addresses(fleet) == [f"{roce_addr}/24"]
        assert list(ipv4_gids(fleet).values()) == [roce_addr]
        env = parse_env(fleet.run({NODE: ["cat", "/etc/sparkrack/nccl.env"]})[NODE].stdout)
        assert ipv4_gids(fleet)[int(env["NCCL_IB_GID_INDEX"])] == roce_addr
