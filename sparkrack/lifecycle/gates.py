"""Preconditions of an engine start, each a named gate with a one-line verdict: the cheap ones
first, then the burn and the power projection; `--override-power REASON` lets only the
power gate pass, recorded (docs/engines.md#gates).
"""

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TypeVar

from sparkrack.deployments.ranks import parallel
from sparkrack.deployments.record import Deployment, records_of
from sparkrack.deployments.running import running
from sparkrack.engineenv import NodeEnv
from sparkrack.engines import EngineLane, LaunchSpec, lane_specs
from sparkrack.engines.option_names import VERSION_LABEL
from sparkrack.engines.serving import MemoryFraction
from sparkrack.facts import node as node_facts
from sparkrack.facts import records as record_facts
from sparkrack.facts.node import NodeFacts, burn_this_boot
from sparkrack.facts.provision import facts_of
from sparkrack.facts.queries import answer, argv
from sparkrack.facts.roce import ADDRESS_FIX, Function, lost_addresses, node_fabric
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.cachefolders import cache_gate_lines, cache_key
from sparkrack.lifecycle.phases import Phases
from sparkrack.lifecycle.railgate import rail_line
from sparkrack.provision.envfiles import EnvFiles
from sparkrack.rails import check_fabric
from sparkrack.rules import check_lane
from sparkrack.safety import gateburn
from sparkrack.safety.power import CapState, project_power
from sparkrack.safety.stripcheck import measured_strip
from sparkrack.transfer.models import gate_problems

T = TypeVar("T")


@dataclass
class Gate:
    """One precondition's verdict."""

    name: str
    ok: bool
    detail: str
    blocking: bool = True


@dataclass
class Preflight:
    """Every gate's verdict plus the facts later steps reuse."""

    gates: list[Gate] = field(default_factory=list)
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    env: dict[str, NodeEnv] = field(default_factory=dict)
    records: dict[str, Deployment | None] = field(default_factory=dict)  # the head's, by kind
    specs: tuple[LaunchSpec, ...] = ()
    image_id: str = ""
    image_labels: dict = field(default_factory=dict)  # the head's image's
    model_path: str = ""
    weights_digest: str = ""  # the manifest's digest every node holds
    waivers: dict = field(default_factory=dict)
    overrides: list = field(default_factory=list)
    lost_addresses: dict[str, list[str]] = field(default_factory=dict)  # node -> netdevs
    devices: dict[str, Mapping[str, Function]] = field(default_factory=dict)  # RDMA, per node

    @property
    def blocking(self) -> list[Gate]:
        return [g for g in self.gates if not g.ok and g.blocking]

    def add(self, name: str, problems: list[str], ok_detail: str, blocking: bool = True) -> None:
        """Record a gate from its list of problems (none = passed)."""
        self.gates.append(Gate(name, not problems, "; ".join(problems) or ok_detail, blocking))


def flag_value(spec: LaunchSpec, flag: str) -> str | None:
    """The value following flag in a rank's argv (None when absent)."""
    argv = list(spec.argv)
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def preflight(fleet: Fleet, inventory: Inventory, lane: EngineLane, *,
              deployment_id: str, replacing: str | None = None,
              override_power: str | None = None, keep_verified: bool = False,
              phases: Phases | None = None, fabric_check: bool = False,
              meanwhile: Callable[[Preflight], None] | None = None,
              allow_degraded: bool = False) -> Preflight:
    """Run every gate for starting the lane (engines/lane.py: its image the lane's, else
    the inventory's); report.specs are the launch specs,
    built from the env files each node has (the inventory's view if they are not right:
    the env gate then refuses). `replacing` is the deployment id a roll is about to stop
    (its containers do not count as "another engine", and memory is judged after it
    stopped). The burn (safety/gateburn.py) runs only when every cheap gate passed; with
    keep_verified, only on
    the nodes not verified this boot. With a PDU in the inventory the strip's measured draw
plus what the engine would add is judged too (safety/stripcheck.py). meanwhile(report), if given, runs while the burn does
    (it must not touch a GPU: `up` creates its containers there). fabric_check: measure
    every rail first (sparkrack/rails). allow_degraded: an HCA of nccl_ib_hca missing or
    down is a warning, not a refusal (NCCL runs on the rails left). Phases: "gates",
    "fabric", "burn"."""
    phases = phases or Phases()
    with phases.timed("gates"):
        report = cheap_gates(fleet, inventory, lane, deployment_id, replacing, allow_degraded)
    if report.blocking:
        return report  # refused on a cheap gate: no burn
    if fabric_check:
        with phases.timed("fabric"):
            fabric = check_fabric(inventory, fleet=fleet)
        report.add("fabric", fabric.problems, f"{len(fabric.measured)} rails pass a "
                   f"{fabric.mtu}-byte frame and a burst")
        if report.blocking:
            return report

    verified = verified_this_boot(report.facts) if keep_verified else []
    to_burn = [node for node in fleet.nodes if node.name not in verified]

    def run_burn() -> list:
        with phases.timed("burn"):
            return gateburn.gate_burn(inventory, to_burn, fleet=fleet) if to_burn else []

    burned = run_burn() if meanwhile is None else alongside(run_burn, lambda: meanwhile(report))
    kept = f"; {', '.join(verified)} verified this boot, not burned again" if verified else ""
    report.add("clock cap", grouped([(b.node, b.reason) for b in burned if not b.ok]),
               f"every GPU at or below {inventory.vars.clock_cap_mhz} MHz under load{kept}")
    states = {b.node: CapState.CAPPED if b.ok else CapState.UNCAPPED for b in burned}
    states.update({name: CapState.CAPPED for name in verified})
    budget = project_power(inventory, states)
    power_gate(report, "power", budget.blocking, budget.reason, override_power)
    strip, unread = measured_strip(inventory, {d.node: d.watts for d in budget.nodes},
                                   "the engine would add (each node to its worst case)")
    if strip is not None:
        power_gate(report, "strip", strip.blocking, strip.reason, override_power)
    elif unread:
        report.add("strip", [unread], "", blocking=False)
    return report


def power_gate(report: Preflight, name: str, blocking: bool, reason: str,
               override_power: str | None) -> None:
    """A power gate's verdict; --override-power REASON lets a refusal pass, recorded."""
    if blocking and override_power:
        report.overrides.append(f"{name}: {reason}; override: {override_power}")
        report.add(name, [], f"OVERRIDDEN ({override_power}): {reason}")
    else:
        report.add(name, [reason] if blocking else [], reason)


def cheap_gates(fleet: Fleet, inventory: Inventory, lane: EngineLane, deployment_id: str,
                replacing: str | None, allow_degraded: bool = False) -> Preflight:
    """The gates that cost nothing but a round trip or two: reachable, lock, env files,
    other engines, rules, image IDs, memory; report.specs built from the env files read."""
    report = Preflight()
    env_files = EnvFiles(inventory, lane.image_key)
    gather_facts_and_env(fleet, env_files, report)
    if report.blocking:
        return report  # nothing else can be judged on a partial rack
    lock_gate(report)
    rewritten, failed = env_files.rewrite_moved(fleet, report.env)  # a GID moved at a boot
    if rewritten or failed:
        report.add("gid index", failed, "; ".join(rewritten))
    lost = report.lost_addresses  # Gloo and NCCL need them: judged before the env files
    report.add("fabric addresses", [f"{node}: {'; '.join(found)}: {ADDRESS_FIX}"
                                    for node, found in lost.items()],
               "every fabric netdev holds its inventory address")
    problems = [f"{node}: {problem} (run `invoke provision`)"
                for node, env in report.env.items() if node not in lost
                for problem in env.problems]
    problems = [p for p in problems if RAIL_PROBLEM not in p]  # the rails gate says them
    report.add("env files", problems,
               f"every rank gets its node's env files ({', '.join(env_files.files(inventory.head))})")
    rails = [line for node in inventory.nodes if node.name in report.devices
             for line in [rail_line(node, _values(report.env.get(node.name)),
                                    report.devices[node.name])] if line]
    report.add("rails", rails, "every rank's NCCL on every HCA of nccl_ib_hca",
               blocking=not allow_degraded)  # --allow-degraded: NCCL runs on the rails left
    report.specs = lane_specs(inventory, lane, deployment_id=deployment_id,
                              node_env=None if problems else report.env)
    judge_rack(fleet, inventory, lane, report.specs, report, replacing)
    if report.image_id:  # each rank binds its node's compile caches (lifecycle/cachefolders.py)
        report.specs = lane_specs(inventory, lane, deployment_id=deployment_id,
                                  node_env=None if problems else report.env,
                                  cache=cache_key(report.image_id, report.facts))
        unknown, mounted = cache_gate_lines(report.specs, report.facts)
        report.add("compile caches", unknown, mounted, blocking=False)
    return report


RAIL_PROBLEM = ": nccl_env: HCA "  # role nccl_env's checks of nccl_ib_hca: missing, down


def _values(env: NodeEnv | None) -> dict[str, str]:
    """A node's env file values (empty: none read)."""
    return {} if env is None else {key: var.value for key, var in env.vars.items()}


def alongside(main: Callable[[], T], side: Callable[[], None]) -> T:
    """main() in a worker thread while side() runs in this one; main's result. If side
    raises, main is still waited for (nothing is left running), then side's error raised."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="alongside") as pool:
        pending = pool.submit(main)
        try:
            side()
        except BaseException:
            wait([pending])
            raise
        return pending.result()


def verified_this_boot(facts: dict[str, NodeFacts]) -> list[str]:
    """Nodes whose cap a burn verified under load this boot (facts.node.burn_this_boot),
    the cap unit still active and successful."""
    return [name for name, f in facts.items()
            if (burn_this_boot(f) or {}).get("ok") and f.clock_cap.succeeded]


def lock_gate(report: Preflight) -> None:
    """The rack lock's line, when this process holds it (the CLI's changing tasks do)."""
    from sparkrack.oplock.lock import held

    lock = held()
    if lock is not None:
        report.add("lock", [], f"held by this task ({lock.holder['operator']}) on {lock.home.name}")


def gather_facts_and_env(fleet: Fleet, env_files: EnvFiles, report: Preflight) -> None:
    """One round trip per node: its facts and its env files, and the head's deployment
    records in its trip, into report (the reachable gate names every node that did not
    answer)."""
    nodes = {n.name: n for n in fleet.nodes}
    head = fleet.inventory.head.name
    asked = {name: node_facts.queries() + env_files.queries(n)
             + (record_facts.queries() if name == head else []) for name, n in nodes.items()}
    results = fleet.run({name: argv(asked[name]) for name in nodes}, timeout=20)
    lost = [f"{r.node}: {r.error}" for r in results if r.status != "ok"]
    for result in results:
        if result.status != "ok":
            continue
        answers = answer(result.stdout, asked[result.node])
        report.facts[result.node] = node_facts.facts_of(answers)
        provisioned = facts_of(answers)
        report.env[result.node] = env_files.read(nodes[result.node], provisioned)
        report.devices[result.node] = provisioned.functions
        lost = lost_addresses(node_fabric(nodes[result.node]), provisioned.roce.hcas)
        if lost:
            report.lost_addresses[result.node] = lost
        if result.node == head:
            report.records = records_of(answers)
    report.add("reachable", lost, f"all {len(results)} nodes answer")


def judge_rack(fleet: Fleet, inventory: Inventory, lane: EngineLane, specs: tuple[LaunchSpec, ...],
               report: Preflight, replacing: str | None) -> None:
    """The gates that read the running rack: other engines, rules, image, memory (the
    lane's specs, judged by the lane's rules, options and serving facts)."""
    head = specs[0]
    found = running(fleet)
    others = [r for r in found.alive if r.deployment != replacing]
    report.add("no other engine", [f"{r.engine} {r.profile} rank {r.rank} runs on {r.node} "
                                   f"({r.name}); run `invoke down` or `invoke roll`" for r in others[:1]]
               + [f"{node}: docker: {e}" for node, e in found.errors.items()], "no engine running")

    rules = check_lane(inventory, lane, specs=specs,
                       node_kernels={n: f.kernel_facts() for n, f in report.facts.items()})
    report.waivers = dict(rules.waivers)
    report.add("rules", [f"{f.rule}: {f.message} ({f.where(rules.node_count)})" for f in rules.blocking],
               f"{len(rules.warnings)} warning(s), {len(rules.waived)} waived")

    report.add("image", image_problems(fleet, specs, report)
               + version_problems(lane, head, report.image_id, report.image_labels),
               f"{head.image} is {report.image_id[:19]} everywhere")
    report.model_path = head.docker.mounts[0].source
    report.weights_digest, problems = gate_problems(fleet, fleet.nodes, report.model_path)
    report.add("weights", problems, f"{report.model_path} complete everywhere (manifest "
                                    f"{report.weights_digest[:12]})")
    # a roll's old engine still holds the memory: judged after it stops; another engine holds
    # it too, and the gate above names that engine as the reason
    if replacing is None and not others:
        report.add("memory", memory_problems(specs, report.facts, lane.serving.memory_fraction),
                   "enough MemAvailable on every node")


def grouped(problems: list[tuple[str, str]]) -> list[str]:
    """[(node, why)] -> one line per distinct why, naming every node it applies to."""
    by_reason: dict[str, list[str]] = {}
    for node, why in problems:
        by_reason.setdefault(why, []).append(node)
    return [f"{', '.join(nodes)}: {why}" for why, nodes in by_reason.items()]


def image_problems(fleet: Fleet, specs: tuple[LaunchSpec, ...], report: Preflight) -> list[str]:
    """Nodes where the image is missing or has another ID than the head's; the head's ID
    and labels kept in report."""
    def image_info(spec: LaunchSpec) -> tuple[str, dict[str, str]] | None:
        try:
            return fleet.docker(spec.node).image_info(spec.image)
        except Exception:  # a node lost since the facts: named by the reachable gate
            return None

    infos = dict(zip((s.node for s in specs), parallel(specs, image_info), strict=False))
    ids = {node: info[0] if info else None for node, info in infos.items()}
    reference = ids.get(specs[0].node)
    report.image_id = reference or ""
    report.image_labels = (infos.get(specs[0].node) or ("", {}))[1]
    problems = [f"{node}: {specs[0].image} missing (run `invoke provision --role engine_images`)"
                for node, found in ids.items() if found is None]
    problems += [f"{node}: image ID {found[:19]} differs from {specs[0].node}'s {reference[:19]}"
                 for node, found in ids.items() if found and reference and found != reference]
    return problems


def version_problems(lane: EngineLane, head: LaunchSpec, image_id: str,
                     labels: Mapping[str, str]) -> list[str]:
    """The lane's flags were checked against another version than the image on the head
    (image_id, labels) runs: its options were learned from an older image under the same
    ref (a tag pushed again), or, read from its tag, the image's own version label says
    otherwise."""
    version, options = lane.version, lane.options  # the table of head.image's version
    learn = f"run `invoke engines.learn --engine {head.engine}`"
    if version.source == "image":
        if options is None or not options.image_id or not image_id \
                or options.image_id == image_id:
            return []
        return [f"{head.image} is {image_id[:19]} on {head.node}, its options were learned "
                f"from {options.image_id[:19]} (the tag was pushed again): {learn}"]
    said = labels.get(VERSION_LABEL)
    if not said or version.version is None or said.lstrip("v") == version.version:
        return []
    return [f"{head.image} on {head.node} says it runs {head.engine} {said} (label "
            f"{VERSION_LABEL}), its tag {version.version}: {learn} (reads the options of "
            "the version it runs)"]


def memory_problems(specs: tuple[LaunchSpec, ...], facts: dict[str, NodeFacts],
                    memory: MemoryFraction) -> list[str]:
    """Nodes whose MemAvailable is below what the profile's memory fraction will take (the
    flag's value, else the engine's default: its file's serving.memory_fraction)."""
    flag = memory.flag
    problems = []
    for spec in specs:
        f = facts.get(spec.node)
        if f is None or not f.mem_total_kb or f.mem_available_kb is None:
            problems.append(f"{spec.node}: MemAvailable unknown")
            continue
        fraction = float(flag_value(spec, flag) or memory.default)
        need = fraction * f.mem_total_kb
        if f.mem_available_kb < need:
            problems.append(f"{spec.node}: MemAvailable {f.mem_available_kb / 2**20:.1f} GiB < "
                            f"{need / 2**20:.1f} GiB ({flag} {fraction} of {f.mem_total_kb / 2**20:.1f} GiB)")
    return problems
