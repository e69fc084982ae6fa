"""Step 2, facts and baseline: what the new node is, next to what the rack is. `compare`
(pure) lists every difference from the members' baseline; kinds in BLOCKING refuse unless
waived (docs/onboarding.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

from sparkrack.facts import node as node_facts
from sparkrack.facts import provision
from sparkrack.facts.docker import IMAGES
from sparkrack.facts.onboard import DOCKER, LINKS, NetdevFacts, links_query
from sparkrack.facts.queries import Answers, Query, answer, argv
from sparkrack.facts.roce import (
    NETDEVS,
    netdev_of,
    node_fabric,
    roce_query,
    wanted_gids,
)
from sparkrack.fleet import Fleet
from sparkrack.inventory import Node
from sparkrack.inventory.values import address_problem
from sparkrack.onboard.context import Context, Step
from sparkrack.onboard.outcomes import Difference, Facts

GB10 = "NVIDIA GB10"

# kind -> what it means; BLOCKING kinds break a TP group (refused unless waived)
KINDS = {
    "not-gb10": "the GPU is not a GB10 (or nvidia-smi does not answer)",
    "driver-major": "another NVIDIA driver major version than the rack",
    "known-bad-kernel": "a host kernel that breaks RDMA memory registration (HOST-KERNEL)",
    "missing-hca": "an HCA of NCCL_IB_HCA is missing",
    "hca-down": "an HCA's port or netdev is down",
    "mtu": "a RoCE netdev's MTU differs from the rack's (provision's role fabric sets it)",
    "docker": "docker does not answer (no images, no engine)",
    "nvidia-runtime": "no NVIDIA container runtime hook: `--gpus all` cannot start",
    "driver": "another driver minor version",
    "kernel": "another host kernel",
    "os": "another OS release",
    "memory": "another memory size (beyond the spread of units and releases)",
    "docker-version": "another docker version",
    "gid-index": "the HCAs carry the fabric addresses at different GID indexes (one NCCL value)",
    "clock-cap": "the clock cap unit is not active (provision installs it)",
    "time": "the node's clock is off from this machine's",
}
BLOCKING = ("not-gb10", "driver-major", "known-bad-kernel", "missing-hca", "hca-down",
            "docker", "nvidia-runtime")
TIME_SKEW_S = 2.0
# MemTotal differs by some MiB between units and by about 2 GiB between OS releases
# (docs/field-notes.md): within this fraction of the members' it is the same memory
MEMORY_SPREAD = 0.03


def queries(node: Node, *, images: bool = True) -> list[Query]:
    """What one round trip asks a node for its onboarding facts."""
    hcas = list(node.vars.nccl_ib_hca)
    return [*node_facts.queries(), *(roce_query(h) for h in hcas), NETDEVS,
            *([IMAGES] if images else []), DOCKER,
            links_query(hcas, sorted(set(node.vars.nccl_socket_ifname.split())))]


def gather(fleet: Fleet, nodes: Sequence[Node], *, images: bool = True) -> dict[str, Facts]:
    """Facts of nodes (one round trip each, all nodes at once)."""
    asked = {n.name: queries(n, images=images) for n in nodes}
    sent = time.time()
    results = fleet.run({name: argv(asked[name]) for name in asked}, timeout=30)
    received = time.time()
    facts = {}
    for node in nodes:
        result = results[node.name]
        if not result.ok:
            facts[node.name] = Facts(node.name, error=result.error or result.status)
            continue
        facts[node.name] = build_facts(node, answer(result.stdout, asked[node.name]),
                                       now=(sent + received) / 2)
    return facts


def build_facts(node: Node, answers: Answers, now: float | None = None) -> Facts:
    """Facts from one round trip's answers (pure)."""
    status = node_facts.facts_of(answers)
    gathered = provision.facts_of(answers)
    docker = answers.get(DOCKER)
    netdevs: dict[str, NetdevFacts] = {}
    for found in answers.each(LINKS).values():
        netdevs.update(found)
    hcas = {}
    for name in node.vars.nccl_ib_hca:
        hca = gathered.roce.hcas.get(name)
        present = bool(hca and hca.present)
        hcas[name] = {"present": present, "state": hca.state if present else "",
                      "netdevs": list(hca.netdevs) if present else [],
                      "gid_index": hca.ipv4_gid_index if present else None}
    skew = None
    if now is not None and gathered.now:
        try:
            skew = float(gathered.now) - now
        except ValueError:
            skew = None
    unit = status.clock_cap
    choice = gathered.roce.choose(wanted_gids(node_fabric(node)))
    return Facts(
        node=node.name, hostname=status.hostname, os=status.os, kernel=status.kernel,
        kernel_problem=status.kernel_facts().problem(),
        gpu_name=status.gpu.name, gpu_error=status.gpu.error, driver=status.gpu.driver,
        mem_total_kb=status.mem_total_kb, sm_mhz=status.gpu.sm_mhz,
        clock_cap=f"{unit.active}/{unit.result or '-'}" if unit.load != "not-found" else "none",
        docker=docker.version, docker_error=docker.error, runtimes=docker.runtimes,
        hook=docker.hook, hcas=hcas, gid_index=choice.index, gid_conflict=choice.conflict,
        netdevs=netdevs,
        images=dict(gathered.images) if gathered.images is not None else None, skew_s=skew)


# --- The comparison (pure) -------------------------------------------------------------


def rack_value(values: Mapping[str, object]) -> tuple[object, str]:
    """(the majority value, how to show the rack's values) of {node: value}."""
    counts = Counter(values.values())
    if not counts:
        return None, "nothing (no member answered)"
    value, _ = counts.most_common(1)[0]
    if len(counts) == 1:
        return value, str(value)
    listing = ", ".join(f"{n}={v}" for n, v in values.items())
    return value, f"{value} on most ({listing})"


def driver_major(version: str | None) -> str | None:
    return version.split(".", 1)[0] if version else None


def compare(new: Facts, members: Mapping[str, Facts], *, hcas: Sequence[str],
            socket_ifname: str, waivers: Mapping[str, str] | None = None) -> list[Difference]:
    """Every difference between new and the members that answered (pure)."""
    waivers = dict(waivers or {})
    peers = {n: f for n, f in members.items() if f.ok}
    found: list[Difference] = []

    def add(kind: str, what: str, node_value: object, rack: str) -> None:
        blocking = kind in BLOCKING
        found.append(Difference(kind, what, str(node_value), rack, blocking,
                                waivers.get(kind) if blocking else None))

    def same(kind: str, what: str, get) -> None:
        value, shown = rack_value({n: get(f) for n, f in peers.items()})
        if peers and get(new) != value:
            add(kind, what, get(new), shown)

    # GPU and driver
    if new.gpu_name != GB10:
        add("not-gb10", "GPU", new.gpu_name or f"none ({new.gpu_error})", GB10)
    major, shown = rack_value({n: driver_major(f.driver) for n, f in peers.items()})
    if peers and driver_major(new.driver) != major:
        drivers = rack_value({n: f.driver for n, f in peers.items()})[1]
        add("driver-major", "NVIDIA driver", new.driver or "none", drivers)
    else:
        same("driver", "NVIDIA driver", lambda f: f.driver)
    # kernel
    if new.kernel_problem:
        add("known-bad-kernel", "host kernel", f"{new.kernel}: {new.kernel_problem}",
            rack_value({n: f.kernel for n, f in peers.items()})[1])
    else:
        same("kernel", "host kernel", lambda f: f.kernel)
    same("os", "OS", lambda f: f.os)
    memory = memory_difference(new.mem_total_kb, [f.mem_total_kb for f in peers.values()])
    if memory:
        add("memory", "MemTotal", *memory)
    # docker
    if new.docker is None:
        add("docker", "docker", f"not answering ({new.docker_error or 'no dockerd'})",
            rack_value({n: f.docker for n, f in peers.items()})[1])
    else:
        same("docker-version", "docker server", lambda f: f.docker)
    if not new.nvidia_runtime:
        add("nvidia-runtime", "nvidia-container-runtime-hook", "absent from dockerd's PATH",
            "present" if any(f.nvidia_runtime for f in peers.values()) else "absent too")
    # RoCE
    for hca in hcas:
        mine = new.hcas.get(hca, {"present": False})
        if not mine["present"]:
            add("missing-hca", f"HCA {hca}", "missing", "present on every member"
                if all(f.hcas.get(hca, {}).get("present") for f in peers.values())
                else rack_value({n: "present" if f.hcas.get(hca, {}).get("present")
                                 else "missing" for n, f in peers.items()})[1])
            continue
        if mine["state"] and "ACTIVE" not in mine["state"].upper():
            add("hca-down", f"HCA {hca} port", mine["state"], "ACTIVE")
        for dev in mine["netdevs"]:
            d = new.netdevs.get(dev)
            if d and d.state and d.state not in ("up", "unknown"):
                add("hca-down", f"netdev {dev} of {hca}", d.state, "up")
    devices = _roce_devices(new, hcas, socket_ifname)
    for dev in devices:
        value, shown = rack_value({n: _mtu(f, dev, hcas, socket_ifname, devices.index(dev))
                                   for n, f in peers.items()})
        mine = new.netdevs.get(dev)
        if peers and (mine.mtu if mine else None) != value:
            add("mtu", f"MTU of {dev}", mine.mtu if mine else "unknown", shown)
    if new.gid_conflict:  # a GID index unlike its peers' is ordinary: units and boots differ
        add("gid-index", "RoCE v2 GID index", "different per HCA", "one index")
    if new.clock_cap != "active/success":
        value, shown = rack_value({n: f.clock_cap for n, f in peers.items()})
        add("clock-cap", "clock cap unit", new.clock_cap, shown)
    if new.skew_s is not None and abs(new.skew_s) > TIME_SKEW_S:
        add("time", "system clock", f"{new.skew_s:+.1f} s", "this machine's")
    return found


def memory_difference(mine: int | None, members: Sequence[int | None]
                      ) -> tuple[str, str] | None:
    """(the node's MemTotal, the members') when the node's is not within MEMORY_SPREAD of
    the members' median, else None: real units differ a little, and that is no
    difference."""
    known = sorted(kb for kb in members if kb)
    if not known:
        return None
    middle = known[len(known) // 2]
    if mine and abs(mine - middle) <= MEMORY_SPREAD * middle:
        return None
    low, high = known[0] / 2**20, known[-1] / 2**20
    rack = f"{low:.1f} GiB" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} GiB"
    return (f"{mine / 2**20:.1f} GiB" if mine else "unknown"), rack


def _roce_devices(facts: Facts, hcas: Sequence[str], socket_ifname: str) -> list[str]:
    """The node's netdevs that carry RoCE / NCCL traffic: the socket interface, the HCAs'."""
    devices = [socket_ifname]
    for hca in hcas:
        devices += [d for d in facts.hcas.get(hca, {}).get("netdevs", []) if d not in devices]
    return devices


def _mtu(facts: Facts, dev: str, hcas: Sequence[str], socket_ifname: str,
         position: int) -> int | None:
    """A member's MTU for the netdev at the same position (names may differ per node)."""
    mine = facts.netdevs.get(dev)
    if mine is not None:
        return mine.mtu
    devices = _roce_devices(facts, hcas, socket_ifname)
    if position < len(devices) and devices[position] in facts.netdevs:
        return facts.netdevs[devices[position]].mtu
    return None


def check_waivers(waivers: Mapping[str, str]) -> dict[str, str]:
    """The waivers, checked: only blocking kinds, each with a reason."""
    from sparkrack.core.errors import UsageError

    checked = {}
    for kind, reason in waivers.items():
        if kind not in BLOCKING:
            raise UsageError(f"--waive {kind}: not a kind that refuses an onboarding",
                             fix="one of " + ", ".join(BLOCKING))
        if not reason or not reason.strip():
            raise UsageError(f"--waive {kind} needs a reason",
                             fix=f"--waive '{kind}=why it is safe here'")
        checked[kind] = reason.strip()
    return checked


# --- The step -----------------------------------------------------------------------------


def run(ctx: Context) -> None:
    """Step 2: the facts of the new node and the members, compared (docs/onboarding.md)."""
    report, new = ctx.report, ctx.new
    with ctx.step("baseline") as step:
        facts = gather(ctx.fleet, [*ctx.members, new])
        report.facts = facts
        mine = facts[new.name]
        if not mine.ok:
            hint = ""
            if "refused key" in (mine.error or ""):
                hint = (f"; put the rack's public key on the node first: ssh-copy-id -i "
                        f"{new.key_file}.pub {new.user}@{new.address}")
            ctx.stop(step, "failed", f"{mine.error}{hint}")
        members = {n.name: facts[n.name] for n in ctx.members}
        down = [f"{n}: {f.error}" for n, f in members.items() if not f.ok]
        for line in down:
            ctx.line(step, f"member not in the baseline: {line}")
        if len(down) == len(members):
            ctx.stop(step, "failed", "no member answered: no baseline to compare with")
        resolve_roce_addr(ctx, step, mine)
        report.differences = compare(
            mine, members, hcas=new.vars.nccl_ib_hca,
            socket_ifname=new.vars.nccl_socket_ifname, waivers=ctx.options.waivers)
        for difference in report.differences:
            ctx.line(step, difference.line())
        refusing = [d for d in report.differences if d.refuses]
        if refusing:
            ctx.stop(step, "refused", "refused: " + "; ".join(
                f"{d.kind} ({d.what}: {d.node_value}, rack {d.rack_value})" for d in refusing)
                + " (waive with --waive KIND=REASON only if you know it is safe)")
        resolve_roce_twin_addr(ctx, step, mine)  # after: a missing twin HCA refuses above
        notes = len(report.differences)
        compared = len(members) - len(down)
        ctx.set(step, "ok", f"{mine.gpu_name}, driver {mine.driver}, kernel "
                f"{mine.kernel}; {compared} member(s) compared, "
                f"{notes} difference(s), none refusing" if notes else
                f"{mine.gpu_name}, driver {mine.driver}, kernel {mine.kernel}: matches "
                f"the {compared} member(s) compared")


def resolve_roce_addr(ctx: Context, step: Step, mine: Facts) -> None:
    """The new node's fabric address: --roce-addr, else its management address when the
    members have no separate one, else the IPv4 on its nccl_socket_ifname."""
    if ctx.roce_addr is not None:
        ctx.report.roce_addr = ctx.roce_addr
        return
    if all(m.roce_addr == m.address for m in ctx.members):
        ctx.report.roce_addr = ctx.new.address
        return
    dev = ctx.new.vars.nccl_socket_ifname
    found = (mine.netdevs.get(dev).ipv4 if mine.netdevs.get(dev) else "").split("/")[0]
    if not found or address_problem(found):
        ctx.stop(step, "failed", f"the members have their own roce_addr, and {dev} on "
                 f"{ctx.new.name} has no IPv4 address: pass --roce-addr")
    ctx.line(step, f"roce_addr {found} (the IPv4 address of {dev})")
    ctx.roce_addr = ctx.report.roce_addr = found


def resolve_roce_twin_addr(ctx: Context, step: Step, mine: Facts) -> None:
    """The new node's twin address (the port's other PCIe path, nccl_ib_hca's other
    function): --roce-twin-addr, else none when no member has one, else the IPv4 on the
    twin's netdev (the site's install gives a Spark both)."""
    if ctx.roce_twin_addr is not None:
        ctx.report.roce_twin_addr = ctx.roce_twin_addr
        return
    if not any(m.roce_twin_addr for m in ctx.members):
        return
    socket = ctx.new.vars.nccl_socket_ifname
    named = [dev for dev in map(netdev_of, ctx.new.vars.nccl_ib_hca) if dev and dev != socket]
    twins = [dev for dev in named if dev in mine.netdevs and mine.netdevs[dev].mtu is not None]
    if named and not twins:  # its HCA is missing (a waived difference): nothing to address
        ctx.line(step, f"no roce_twin_addr: {', '.join(named)} absent on {ctx.new.name}")
        return
    held = {dev: mine.netdevs[dev].ipv4.split("/")[0] for dev in twins}
    found = next(((dev, ip) for dev, ip in held.items() if ip and not address_problem(ip)),
                 None)
    if found is None:
        ctx.stop(step, "failed", f"the members have a roce_twin_addr, and {ctx.new.name} "
                 f"has no IPv4 address on {', '.join(twins) or 'a twin netdev'}: pass "
                 "--roce-twin-addr")
    ctx.line(step, f"roce_twin_addr {found[1]} (the IPv4 address of {found[0]})")
    ctx.roce_twin_addr = ctx.report.roce_twin_addr = found[1]
