"""The node checks the NCCL environment stands on, each a one-line reason when it fails
(pure): an HCA of nccl_ib_hca at all, every HCA's port ACTIVE, one RoCE v2 GID index for
every HCA, the socket interface present and cabled. Role nccl_env asserts each by its name
(`engine_env.check(NAME, facts)`); `up`, `plan` and onboarding's verify read them beside
the env files (drift.py). docs/engines.md#where-each-variable-comes-from
"""

from __future__ import annotations

from sparkrack.engineenv.gid import GidIndex
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.inventory import Node

HCAS = "hcas"  # none of nccl_ib_hca is a device (one misnamed: role nccl_env's warning)
PORTS = "ports"
GID = "gid"
SOCKET = "socket"
SOCKET_CABLED = "socket_cabled"
NAMES = (HCAS, PORTS, GID, SOCKET, SOCKET_CABLED)  # in the role's order


def check(name: str, node: Node, gid: GidIndex, facts: ProvisionFacts) -> str:
    """Why check name fails on node ('' when it holds)."""
    hcas = list(node.vars.nccl_ib_hca)
    listed = ",".join(hcas)
    ifname = node.vars.nccl_socket_ifname
    if name == HCAS:
        missing = facts.roce.missing
        return "" if len(missing) < len(hcas) else (
            f"HCA {', '.join(missing)} missing under /sys/class/infiniband (NCCL_IB_HCA lists "
            f"{listed}): check the QSFP cable and the mlx5 driver (ibdev2netdev lists what the "
            "node has), or fix nccl_ib_hca for this node")
    if name == PORTS:
        down = facts.roce.down
        return "" if not down else (
            f"HCA {', '.join(down)} port is not ACTIVE (NCCL_IB_HCA lists {listed}; NCCL would "
            "skip it in silence and run on the rails left, at a fraction of the bandwidth, or "
            f"over TCP with none left): {facts.cabling(node.name)} (`ibdev2netdev` shows the "
            "link states)")
    if name == GID:
        return "" if not gid.conflict else (
            "the HCAs carry their fabric addresses' RoCE v2 GIDs at different indexes "
            f"({gid.conflict}) but NCCL_IB_GID_INDEX is one value: fix the addressing, or set "
            "nccl_ib_gid_index for this node in host_vars")
    if name == SOCKET:
        return "" if ifname in facts.netdevs else (
            f"nccl_socket_ifname {ifname} is not an interface of this node (it has "
            f"{', '.join(facts.netdevs)})")
    if name == SOCKET_CABLED:
        return "" if not facts.netdev_down(ifname) else (
            f"nccl_socket_ifname {ifname} is a RoCE function whose port is down (the "
            f"rendezvous and NCCL's bootstrap would not reach the fabric): "
            f"{facts.cabling(node.name)}")
    raise ValueError(f"no check {name!r} of the NCCL environment (one of {', '.join(NAMES)})")


def failing(node: Node, gid: GidIndex, facts: ProvisionFacts) -> list[str]:
    """The reasons of every check that fails on node, in the role's order."""
    return [why for name in NAMES for why in [check(name, node, gid, facts)] if why]
