"""Step 5, verify: the new node and the rack reach each other on the engine ports (the node
script: remote/probe.py), its env files are what provision writes, and its GPU holds the
clock cap under load (docs/onboarding.md).
"""

from __future__ import annotations

import secrets as token_source
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack import remote
from sparkrack.core.errors import SparkrackError
from sparkrack.engines.catalog import engine_names
from sparkrack.engines.profile_file import load_engine
from sparkrack.fleet import Fleet, NodeResult
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Inventory, Node
from sparkrack.onboard.context import Context
from sparkrack.onboard.outcomes import Reach, VerifyReport
from sparkrack.provision.envfiles import EnvFiles
from sparkrack.safety.burn import burn
from sparkrack.transfer.chain import DEFAULT_PYTHON

HOLD_S = 8.0  # a listener's longest life
SERVED_BY_EVERY_RANK = ("http",)  # other ports (dist_init, master) are the head's

@dataclass(frozen=True)
class PortPlan:
    """Which ports each node is probed on."""

    every_rank: tuple[int, ...]  # ports every rank serves (engines' http)
    head_only: tuple[int, ...]  # rendezvous ports on the head
    names: Mapping[int, str] = field(default_factory=dict)  # port -> "sglang http"


def engine_ports(inventory: Inventory) -> PortPlan:
    """The engine ports from the inventory's engine profiles."""
    every, head, names = set(), set(), {}
    for engine in engine_names(inventory.path):
        try:
            definition = load_engine(inventory.path, engine, inventory.vars.images)
        except SparkrackError:
            continue
        for name, port in definition.ports.items():
            (every if name in SERVED_BY_EVERY_RANK else head).add(int(port))
            names[int(port)] = f"{engine} {name}"
    return PortPlan(tuple(sorted(every)), tuple(sorted(head - every)), names)


def _endpoint(node: Node, port: int) -> str:
    address = node.roce_addr
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def ports_for(node: Node, plan: PortPlan, head: str) -> tuple[int, ...]:
    return plan.every_rank + (plan.head_only if node.name == head else ())


def probe_reach(fleet: Fleet, new: Node, members: Sequence[Node], plan: PortPlan, head: str,
                *, python: str = DEFAULT_PYTHON, hold: float = HOLD_S) -> VerifyReport:
    """Both directions of the engine-port reachability check (docs/onboarding.md)."""
    report = VerifyReport()
    token = token_source.token_hex(8).encode() + b"\n"  # on stdin: argv is what `ps` shows
    new_ports = plan.every_rank + plan.head_only  # the new node may become the head
    listeners = {new.name: remote.argv(python, "probe", "listen", new.roce_addr,
                                       str(len(members)), f"{hold:g}", *map(str, new_ports))}
    for member in members:
        listeners[member.name] = remote.argv(python, "probe", "listen", member.roce_addr, "1",
                                             f"{hold:g}",
                                             *map(str, ports_for(member, plan, head)))
    heard: dict[str, NodeResult] = {}

    def listen() -> None:
        for result in fleet.run(listeners, timeout=hold + 30, stdin=token):
            heard[result.node] = result

    thread = threading.Thread(target=listen, name="probe-listen", daemon=True)
    thread.start()
    targets_new = [_endpoint(m, p) for m in members for p in ports_for(m, plan, head)]
    connectors = {new.name: remote.argv(python, "probe", "connect", f"{hold - 2:g}",
                                        *targets_new)}
    for member in members:
        connectors[member.name] = remote.argv(python, "probe", "connect", f"{hold - 2:g}",
                                              *[_endpoint(new, p) for p in new_ports])
    probes = fleet.run(connectors, timeout=hold + 30, stdin=token)
    thread.join()
    by_endpoint = {_endpoint(m, p): (m.name, p) for m in [*members, new]
                   for p in new_ports}
    for result in probes:
        data = last_json_object(result.stdout)
        if not data:
            report.errors.append(f"{result.node}: probe did not run: {result.error}")
            continue
        for endpoint, outcome in data.items():
            target, port = by_endpoint.get(endpoint, (endpoint, 0))
            report.reach.append(Reach(result.node, target, port, outcome.get("state", "failed"),
                                      outcome.get("detail", "")))
    for name, result in heard.items():
        data = last_json_object(result.stdout)
        for port, why in (data.get("busy") or {}).items():
            report.notes.append(f"{name}: port {port} ({plan.names.get(int(port), '?')}) is in "
                                f"use ({why}): reached without a listener of ours")
    report.reach.sort(key=lambda r: (r.source != new.name, r.source, r.target, r.port))
    return report


def verify_node(fleet: Fleet, inventory: Inventory, new: Node, members: Sequence[Node], *,
                burn_seconds: float = 5.0, python: str = DEFAULT_PYTHON) -> VerifyReport:
    """Reachability both ways, then the burn check of the new node's clocks."""
    plan = engine_ports(inventory)
    if not plan.every_rank and not plan.head_only:
        report = VerifyReport(errors=["no engine profile names a port"])
    else:
        report = probe_reach(fleet, new, members, plan, inventory.head.name, python=python)
    report.errors += env_problems(fleet, inventory, new)
    report.burn = burn(inventory, [new], burn_seconds, fleet=fleet)[0]
    return report


def env_problems(fleet: Fleet, inventory: Inventory, new: Node) -> list[str]:
    """What would make the `up` env gate refuse the new node, for every engine."""
    problems = []
    for engine in engine_names(inventory.path):
        key = load_engine(inventory.path, engine, inventory.vars.images).image_key
        files = EnvFiles(inventory, key)
        envs, errors = files.read_all(fleet, [new])
        problems += [f"{engine} env files: {why}" for why in errors.values()]
        problems += [f"{engine} env files: {p}" for env in envs.values() for p in env.problems]
    return problems




def run(ctx: Context) -> None:
    """Step 5: probe the ports both ways, check the env files, burn the GPU."""
    report, new, burn_seconds = ctx.report, ctx.new, ctx.options.burn_seconds
    with ctx.step("verify") as step:
        plan = engine_ports(ctx.work)
        if report.check:
            ports = ", ".join(f"{p} ({plan.names[p]})" for p in (*plan.every_rank,
                                                                 *plan.head_only))
            ctx.set(step, "would", f"would probe ports {ports} between {new.name} and "
                    f"{len(ctx.members)} members both ways, and burn {new.name}'s GPU "
                    f"for {burn_seconds:g} s")
            return
        result = verify_node(ctx.fleet, ctx.work, new, ctx.members,
                             burn_seconds=burn_seconds, python=ctx.options.python)
        report.verify = result
        for note in result.notes:
            ctx.line(step, note)
        for reach in result.failed:
            ctx.line(step, f"UNREACHABLE {reach.source} -> {reach.target}:{reach.port} "
                     f"({plan.names.get(reach.port, '?')}): {reach.detail}")
        for error in result.errors:
            ctx.line(step, error)
        burned = result.burn
        if burned is not None:
            ctx.line(step, f"burn: {burned.verdict}: {burned.reason}")
        probes = len(result.reach)
        if not result.ok:
            why = (f"{len(result.failed)} of {probes} port probes failed" if result.failed
                   else "; ".join(result.errors) if result.errors
                   else f"burn {burned.verdict}: {burned.reason}" if burned else "no burn")
            ctx.stop(step, "failed", why)
        ctx.set(step, "ok", f"{probes} port probes ok both ways; env files as provisioned; "
                f"burn {burned.summary}")
