"""The checks that are code because they need arithmetic or cross-references: KV fit, the
TP group, the head's API address, the rendezvous address, the engine version of the image,
experimental profiles, each node's host kernel (its facts judged by facts.kernel).

Each takes the Target and yields Hits (problems) and Skips (could not check);
rules.yml names them as `check: {code: NAME}` with NAME a key of CODE_CHECKS.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from sparkrack.engines import LaunchSpec
from sparkrack.engines.option_names import LEARNED_DIR, PINNED, tables
from sparkrack.facts.roce import socket_address
from sparkrack.rules.argv import address_part, number
from sparkrack.rules.findings import WARNING
from sparkrack.rules.target import Hit, Skip, Target

CodeCheckFunction = Callable[[Target], Iterable[Hit | Skip]]
WILDCARD_HOSTS = ("0.0.0.0", "::")


def kv_fit(target: Target) -> Iterator[Hit | Skip]:
    """The context length's KV per node (model data: bytes per token for the engine and KV
    dtype) against the memory free after weights; a warning when the size is not known."""
    roles = target.engine.flag_roles
    if "context_length" not in roles:
        yield Skip(f"{target.engine.file.name} names no context_length flag (flag_roles)")
        return
    for spec in target.specs:
        yield from _kv_fit_rank(spec, target, roles["context_length"],
                                roles.get("kv_cache_dtype"))


def _kv_fit_rank(spec: LaunchSpec, target: Target, context_flag: str,
                 dtype_flag: str | None) -> Iterator[Hit]:
    """kv_fit for one rank's argv."""
    flags, model, engine = target.flags(spec), target.model, target.engine.name
    context = flags.get(context_flag)
    if not isinstance(context, str):
        yield Hit.on(spec, f"{context_flag} is not given, so the context is the engine's "
                     "default: cannot check", WARNING)
        return
    tokens = number(context)
    if tokens is None:
        yield Hit.on(spec, f"{context_flag} {context} is not a token count")
        return
    dtype = flags.get(dtype_flag)
    dtype = dtype if isinstance(dtype, str) else "auto"
    need = model.kv_gib_per_node(engine, dtype, int(tokens))
    free = model.free_after_weights_gib_per_node
    if need is None:
        yield Hit.on(spec, f"cannot check: {model.file.name} gives no KV bytes per token for "
                     f"{engine} with KV dtype {dtype}", WARNING)
    elif need > free:
        yield Hit.on(spec, f"{int(tokens):,} tokens of {dtype} KV need {need:.2f} GiB per node, "
                     f"{free:.2f} GiB is free after weights")


def tp_group(target: Target) -> Iterator[Hit | Skip]:
    """tp_size equals the node count; every inventory node runs exactly one rank, its own;
    each rank's argv gives that TP size, node count and rank."""
    inventory, count = target.inventory, len(target.inventory.nodes)
    if inventory.vars.tp_size != count:
        yield Hit(f"tp_size is {inventory.vars.tp_size} but the inventory has {count} nodes")
    if not target.specs:
        return
    nodes = {node.name: node for node in inventory.nodes}
    runs = Counter(spec.node for spec in target.specs)
    for node in inventory.nodes:
        if runs[node.name] != 1:
            yield Hit(f"the node runs {runs[node.name]} ranks, not 1", node.name, node.rank)
    for spec in target.specs:
        if spec.node not in nodes:
            yield Hit.on(spec, f"{spec.node} is not in the inventory")
        elif spec.rank != nodes[spec.node].rank:
            yield Hit.on(spec, f"{spec.node} has rank {nodes[spec.node].rank} in the inventory")
    if target.launch is None:
        yield Skip(_no_launch_flags(target))
        return
    launch = target.launch
    for spec in target.specs:
        flags = target.flags(spec)
        for flag, expected in ((launch.tp_size, count), (launch.nnodes, count),
                               (launch.node_rank, spec.rank)):
            if number(flags.get(flag)) != expected:
                yield Hit.on(spec, f"{_shown(flag, flags)}, expected {expected}")


def head_host(target: Target) -> Iterator[Hit | Skip]:
    """Rank 0's API listens on every interface or on its node's address, not on loopback."""
    if target.launch is None:
        yield Skip(_no_launch_flags(target))
        return
    flag, default = target.launch.http_host, target.launch.http_host_default
    nodes = {node.name: node for node in target.inventory.nodes}
    for spec in target.specs:
        if not spec.is_head or spec.node not in nodes:
            continue
        flags, address = target.flags(spec), nodes[spec.node].address
        if flags.get(flag, default) not in (*WILDCARD_HOSTS, address):
            shown = (_shown(flag, flags) if flag in flags
                     else f"{flag} is not given ({target.engine.name} binds {default})")
            yield Hit.on(spec, f"{shown}: the API would not answer at {address}; "
                         f"pass {flag} 0.0.0.0")


def rendezvous_addr(target: Target) -> Iterator[Hit | Skip]:
    """Every rank joins the rendezvous at the head's address on nccl_socket_ifname (its
    RoCE address; the management one when NCCL's sockets run there)."""
    if target.launch is None:
        yield Skip(_no_launch_flags(target))
        return
    flag, with_port = target.launch.rendezvous, target.launch.rendezvous_port
    head = socket_address(target.inventory.head)
    for spec in target.specs:
        value = target.flags(spec).get(flag)
        if not isinstance(value, str):
            yield Hit.on(spec, f"{flag} is missing")
        elif address_part(value, with_port) != head:
            yield Hit.on(spec, f"{flag} {value} is not the head's RoCE address {head}")


def engine_version(target: Target) -> Iterator[Hit | Skip]:
    """The image runs an engine version that has an option table, so that the profile was
    checked against the options that version takes."""
    version, options = target.engine.version, target.engine.options
    if version is None or version.engine not in PINNED:
        return
    engine, image = version.engine, version.image
    learn = f"invoke engines.learn --engine {engine} --image {image}"
    if version.version is None:
        yield Hit(f"{image} names no {engine} version in its tag and was not learned: run "
                  f"`{learn}` (reads the version and the options from the image on the head)")
    elif options is None:
        known = ", ".join(tables(engine, target.inventory.path)) or "none"
        yield Hit(f"{image} runs {engine} {version.version}, which has no option table (known: "
                  f"{known}): run `{learn}`, or from its wheel `python -m "
                  "sparkrack.engines.option_extract "
                  f"WHEEL > {target.inventory.path / LEARNED_DIR}/{engine}-{version.version}.txt`")


def experimental(target: Target) -> Iterator[Hit]:
    """An experimental profile runs, with its note as the warning."""
    profile = target.profile
    if profile.experimental:
        yield Hit(profile.note)


def host_kernel(target: Target) -> Iterator[Hit | Skip]:
    """Every node's host kernel from the node facts: a warning when they are not known, an
    error when its CMA counters and command line show KHO's breakage (KernelFacts.problem)."""
    if target.node_kernels is None:
        yield Skip("no node facts given (host kernel per node)")
        return
    for node in target.inventory.nodes:
        facts = target.node_kernels.get(node.name)
        problem = facts.problem() if facts is not None else None
        if facts is None or not facts.known:
            yield Hit("host kernel unknown, cannot check", node.name, node.rank, WARNING)
        elif problem:
            yield Hit(f"host kernel {facts.release}: {problem}", node.name, node.rank)


def _shown(flag: str, flags: dict[str, str | bool]) -> str:
    """A flag as a rank gives it: '--flag value', '--flag (without a value)' or
    '--flag is missing'."""
    value = flags.get(flag)
    if value is None:
        return f"{flag} is missing"
    return f"{flag} {value}" if isinstance(value, str) else f"{flag} (without a value)"


def _no_launch_flags(target: Target) -> str:
    """The Skip reason when the rule set has no launch flags for the engine."""
    return f"no launch_flags for engine '{target.engine.name}' in sparkrack/data/rules.yml"


CODE_CHECKS: dict[str, CodeCheckFunction] = {
    "kv_fit": kv_fit, "tp_group": tp_group, "head_host": head_host,
    "rendezvous_addr": rendezvous_addr, "experimental": experimental,
    "engine_version": engine_version, "host_kernel": host_kernel,
}
