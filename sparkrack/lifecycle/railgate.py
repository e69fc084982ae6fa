"""The rails gate of `up` and `roll`: what each rank's NCCL will use on its node, judged
before any rank starts (pure). NCCL 2.27.7 skips an NCCL_IB_HCA entry that matches no
device and a port that is not ACTIVE without an error (`ncclIbInit` in net_ib.cc), and
runs NET/Socket when none is left: a rank on fewer rails than its node's nccl_ib_hca, or
on TCP, is named with what NCCL will use against what the inventory gives and the fix;
--allow-degraded starts it anyway (docs/engines.md#what-nccl-uses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkrack.facts.roce import Function, cabling_hint
from sparkrack.inventory import Node
from sparkrack.lifecycle.ncclcheck import ALLOW


def nccl_selects(value: str, devices: Sequence[str]) -> list[str]:
    """The devices an NCCL_IB_HCA value selects, as NCCL matches it (utils.cc matchIfList):
    each entry a prefix of the device name ('=' first: exact names, '^' first: all but
    those), ':port' ignored; an empty value selects every device."""
    exclude = value.startswith("^")
    value = value.lstrip("^")
    exact = value.startswith("=")
    entries = [e.split(":")[0] for e in value.lstrip("=").split(",") if e]
    if not entries:
        return list(devices)
    return [d for d in devices
            if any(d == e if exact else d.startswith(e) for e in entries) != exclude]


def rail_line(node: Node, env: Mapping[str, str], functions: Mapping[str, Function]) -> str | None:
    """What NCCL will use on node against its nccl_ib_hca, when it is less (None: every
    HCA of nccl_ib_hca present and its port up). env: the node's env file values
    (NCCL_IB_HCA, NCCL_SOCKET_IFNAME; the inventory's where absent); functions: every RDMA
    device of the node with its port state."""
    want = list(node.vars.nccl_ib_hca)
    missing = [h for h in want if h not in functions]
    down = [h for h in want if h in functions and not functions[h].up]
    if not missing and not down:
        return None
    value = env.get("NCCL_IB_HCA", ",".join(want))
    used = [d for d in nccl_selects(value, list(functions)) if functions[d].up]
    socket = env.get("NCCL_SOCKET_IFNAME") or node.vars.nccl_socket_ifname
    where = f"rank {node.rank} on {node.name}"
    why = []
    if missing:
        why.append(f"{node.name} has no HCA {', '.join(missing)} (its RDMA devices: "
                   f"{', '.join(functions) or 'none'})")
    if down:
        why.append(f"the port of {down[0]} is down" if len(down) == 1 else
                   f"the ports of {', '.join(down)} are down")
    skipped = "NCCL skips " + ("them" if len(missing) + len(down) > 1 else "it")
    hint = cabling_hint(node.name, functions)
    fix = (f"`invoke run --limit {node.name} -- ibdev2netdev` shows its HCAs and their "
           f"ports; {'fix nccl_ib_hca' if missing else 'reseat the cable, or set nccl_ib_hca'}"
           f" in host_vars/{node.name}.yml and `invoke provision --limit {node.name}` "
           f"({hint}); {ALLOW}")
    if not used:
        return (f"{where} would run NCCL over NET/Socket (TCP) on {socket} where the "
                f"inventory gives it NET/IB on {', '.join(want)}: {'; '.join(why)}, and "
                f"{skipped} without an error and falls back to TCP; {fix}")
    rails = ", ".join(f"{d}:1" for d in used)
    return (f"{where} would run NCCL on {len(used)} of {len(want)} rails (NET/IB on {rails}) "
            f"where the inventory gives it {', '.join(want)}: {'; '.join(why)}, and "
            f"{skipped} without an error: about {len(used)}/{len(want)} of the bandwidth; "
            f"{fix}")
