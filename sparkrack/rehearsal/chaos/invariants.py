"""What must hold on the rack after every chaos step, read from the rack itself: `observe`
reads the real state over SSH, docker and from this machine, `judge` (pure) holds it to the
rules: capped, records, lock, audit, inventory, watchdog
(docs/rehearsal.md#faults-at-random-the-chaos-run).
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.deployments import record
from sparkrack.deployments.ranks import Rank, engine_containers
from sparkrack.facts.node import NodeFacts, burn_this_boot, facts_argv, parse_facts
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.oplock import audit
from sparkrack.oplock.lock import call, ended_here
from sparkrack.rehearsal.nodeproc import init_pid
from sparkrack.rehearsal.rack import RehearsalRack

CHANGING = ("up", "roll", "down", "provision", "reboot", "restart-rack", "weights.stage",
            "break-glass", "onboard", "watch.install")
WATCHDOG_GRACE_S = 20.0
WATCHDOG_UNIT = "sparkrack-watchdog.service"


@dataclass
class Observed:
    """The rack's state after a step."""

    facts: dict[str, NodeFacts] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    ranks: list[Rank] = field(default_factory=list)
    clock_locks: dict[str, list | None] = field(default_factory=dict)
    current: str | None = None  # the deployment id of the head's current record
    lock_holder: str | None = None
    audit: list[dict] = field(default_factory=list)
    inventory_problem: str | None = None
    watchdog_problem: str | None = None


def observe(rack: RehearsalRack, inventory: Inventory, local_audit: Path | None = None,
            watchdog_on: str | None = None) -> Observed:
    """The rack's real state (SSH, docker, the simulated GPUs from this machine); the audit
    log is the head's and the commands' local copy (local_audit) together: a command that
    could not reach the head recorded itself there. watchdog_on: the node the watchdog
    service was installed on."""
    seen = Observed()
    lines = []
    with Fleet(inventory) as fleet:
        for result in fleet.run(facts_argv(), timeout=30):
            if result.ok:
                seen.facts[result.node] = parse_facts(result.stdout)
            else:
                seen.unreachable[result.node] = result.error or result.status
        seen.ranks, errors = engine_containers(fleet)
        seen.unreachable.update({n: f"docker: {e}" for n, e in errors.items()})
        head = inventory.head.name
        try:
            current = record.read(fleet, inventory).get("current")
            seen.current = current.deployment_id if current else None
            reply = call(fleet, head, "log")
            if reply.holder is not None and not ended_here(reply.holder):
                seen.lock_holder = reply.holder.describe(time.time())
            lines += audit.parse_lines(reply.audit)
        except Exception as error:  # noqa: BLE001 - an unreachable head is part of the state
            seen.unreachable.setdefault(head, f"records: {error}")
    if local_audit is not None and local_audit.exists():
        lines += audit.parse_lines(local_audit.read_text())
    seen.audit = audit.merge(lines)
    for node in (rack.node(n.name) for n in inventory.nodes):
        pid = init_pid(node)
        path = Path(f"/proc/{pid}/root/run/gpu-sim/clock-lock.json") if pid else None
        try:
            seen.clock_locks[node.name] = json.loads(path.read_text()) if path else None
        except (OSError, ValueError):
            seen.clock_locks[node.name] = None
    seen.inventory_problem = _inventory_problem(inventory.path)
    if watchdog_on is not None:
        seen.watchdog_problem = _watchdog_problem(inventory, watchdog_on)
    return seen


def _watchdog_problem(inventory: Inventory, name: str) -> str | None:
    """Why the watchdog service on node name is not running and serving metrics (None: it
    is), after up to WATCHDOG_GRACE_S of trying."""
    node = inventory.node(name)
    url = f"http://{node.address}:{inventory.vars.watchdog_metrics_port}/metrics"
    deadline = time.monotonic() + WATCHDOG_GRACE_S
    while True:
        with Fleet(inventory, [node]) as fleet:
            unit = fleet.run(["systemctl", "is-active", WATCHDOG_UNIT], timeout=15)[name]
        state = unit.stdout.strip() or unit.error or unit.status
        problem = f"{WATCHDOG_UNIT} on {name} is {state}" if state != "active" else None
        if problem is None:
            try:
                with urllib.request.urlopen(url, timeout=3) as reply:
                    body = reply.read().decode(errors="replace")
                if "sparkrack_watchdog_guarding" not in body:
                    problem = f"{url} answers without the watchdog's metrics"
            except OSError as error:
                problem = f"{url}: {error}"
        if problem is None or time.monotonic() > deadline:
            return problem
        time.sleep(1.0)


def _inventory_problem(path: Path) -> str | None:
    leftovers = sorted(p.name for p in Path(path).rglob(".*") if p.is_file()
                       and p.name.count(".") >= 2 and not p.name.startswith(".sparkrack"))
    try:
        load_inventory(path)
    except Exception as error:  # noqa: BLE001 - any failure to load is the finding
        return f"the inventory no longer loads: {error}"
    return f"temporary files left in the inventory: {', '.join(leftovers)}" if leftovers \
        else None


def judge(seen: Observed, *, cap_mhz: int, nodes: list[str], whole: bool,
          commands: list[tuple[str, float]]) -> list[str]:
    """The violations in seen. commands: (changing task, started ts) the step ran."""
    violations = []
    alive = [r for r in seen.ranks if r.alive]
    for rank in alive:
        facts = seen.facts.get(rank.node)
        burned = burn_this_boot(facts) if facts else None
        lock = seen.clock_locks.get(rank.node)
        if not (burned or {}).get("ok"):
            violations.append(f"capped: rank {rank.rank} runs on {rank.node}, whose GPU no "
                              "burn verified this boot")
        elif not lock or lock[1] > cap_mhz:
            violations.append(f"capped: rank {rank.rank} runs on {rank.node}, whose GPU clock "
                              f"lock is {lock} (cap {cap_mhz} MHz)")
    if whole:
        violations += _records(seen, alive, nodes)
    if seen.lock_holder:
        violations.append(f"lock: still held after the step: {seen.lock_holder}")
    for task, started in commands:
        ended = [e for e in seen.audit if e.get("task") == task and e.get("ts", 0) >= started - 1
                 and e.get("complete") and e.get("outcome") in audit.OUTCOMES]
        if not ended:
            violations.append(f"audit: no record with an outcome for `{task}` run at "
                              f"{started:.0f}")
    if seen.inventory_problem:
        violations.append(f"inventory: {seen.inventory_problem}")
    if seen.watchdog_problem:
        violations.append(f"watchdog: {seen.watchdog_problem}")
    return violations


def _records(seen: Observed, alive: list[Rank], nodes: list[str]) -> list[str]:
    found = []
    others = sorted({f"{r.deployment} (rank {r.rank} on {r.node})" for r in alive
                     if r.deployment != seen.current})
    if others:
        found.append(f"records: orphan rank(s) outside the current record "
                     f"({seen.current or 'unset'}): {', '.join(others)}")
    mine = {r.node for r in alive if r.deployment == seen.current}
    stopped_by_watchdog = any(e.get("task") == "watchdog:stopped" and (e.get("args") or {})
                              .get("deployment") == seen.current for e in seen.audit)
    if seen.current and mine != set(nodes) and not (stopped_by_watchdog and not mine):
        missing = sorted(set(nodes) - mine)
        found.append(f"records: current is {seen.current} but its group is not whole "
                     f"(no live rank on {', '.join(missing)})")
    return found


__all__ = ["CHANGING", "Observed", "judge", "observe"]
