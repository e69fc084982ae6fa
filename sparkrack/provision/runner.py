"""`provision`: gather facts (one round trip per node), plan, apply, re-plan, report.

    report = provision(inventory, limit="spark-03", roles="nccl_env", check=True)
    report.exit_code, report.recap("spark-03")

Every selected node gets one NodeRun whatever happens to the others: unreachable at
gather, failed in the plan, cut during the apply. After an apply the facts are gathered
again and the plan recomputed. What an apply changed can change a fact a later task read
(the fabric's addresses make the RoCE GID that nccl_env probes): a node whose re-plan
still has changes gets one second pass, then a last re-plan; anything still planned
then is "did not converge" (failed). A run with nothing to change touches no file and
re-plans nothing: its one command per node re-applies what no fact can show (a refresh:
the GPU clock lock, role clock_cap), which counts as a change only where it was gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkrack.facts.docker import IMAGES, normalize_ref
from sparkrack.facts.provision import ProvisionFacts, parse_facts
from sparkrack.facts.queries import Query
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.provision.apply import ApplyResult, apply_node
from sparkrack.provision.changes import Change, Transfer
from sparkrack.provision.images import resolve_images
from sparkrack.provision.modules import docker_image
from sparkrack.provision.plan import plan_node, queries
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roles import (
    SITE_FILE,
    load_roles,
    node_vars,
    render_tasks,
    roles_path,
    secret_values,
)
from sparkrack.provision.roletasks import Role, Task
from sparkrack.transfer.chain import DEFAULT_PYTHON, Progress
from sparkrack.transfer.images import ImageTarget, TransferReport, distribute

Event = Callable[[str, "ProvisionReport"], None]


@dataclass
class NodeRun:
    """One node's run: its plan, what the apply did, the re-plan."""

    node: str
    rank: int
    status: str = "ok"  # ok | failed | unreachable
    error: str | None = None
    plan: list[Change] = field(default_factory=list)
    final: list[Change] | None = None  # the re-plan after the last apply
    applied: ApplyResult | None = None
    second: list[Change] | None = None  # the re-plan a second pass applied
    applied_second: ApplyResult | None = None
    facts: ProvisionFacts | None = None

    @property
    def changes(self) -> list[Change]:
        return [c for c in self.plan if c.changed]

    @property
    def refreshes(self) -> list[Change]:
        """What is re-applied on every run while nothing says it is gone (not changes)."""
        return [c for c in self.plan if c.refresh and c.status == "ok"]

    def outcomes(self) -> list[Change]:
        """Each task's final word: the plan, with apply failures and the re-plan folded in."""
        result = []
        final = {(c.role, c.task, c.handler): c for c in self.final or []}
        second = {(c.role, c.task, c.handler): (i, c) for i, c in enumerate(self.second or [])}
        for index, change in enumerate(self.plan):
            key = (change.role, change.task, change.handler)
            position, redone = second.get(key, (None, None))
            if redone is not None and redone.changed:
                if position in self.applied_second.errors:
                    change = replace(redone, status="failed", summary=(
                        f"{redone.summary}: {self.applied_second.errors[position]}"))
                    result.append(change)
                    continue
                change = replace(redone, summary=f"{redone.summary} (second pass)")
            if self.applied and index in self.applied.errors:
                lost = self.status == "unreachable"  # counted as unreachable, like Ansible
                change = replace(change, status="skipped" if lost else "failed", summary=(
                    f"{change.summary}: {self.applied.errors[index]}"))
            elif self.applied and change.applies and index not in self.applied.applied:
                change = replace(change, status="skipped",
                                 summary=f"not applied (the node {self.status} earlier): "
                                 f"{change.summary}")
            elif self.final is not None:
                again = final.get(key)
                if again is not None and again.changed and not change.handler and \
                        not change.deferred:
                    change = replace(change, status="failed",
                                     summary=f"did not converge: {again.summary}")
                elif again is not None and again.status == "failed" or change.status == "pending" and again is not None:
                    change = again
            result.append(change)
        return result


@dataclass
class ProvisionReport:
    """The whole run: one NodeRun per selected node, image transfers, timing."""

    check: bool
    absent: bool
    roles: tuple[str, ...]
    nodes: list[NodeRun] = field(default_factory=list)
    transfers: list[TransferReport] = field(default_factory=list)
    seconds: float = 0.0

    def node(self, name: str) -> NodeRun:
        return next(run for run in self.nodes if run.node == name)

    def recap(self, name: str) -> dict[str, int]:
        """Ansible's recap counts for one node: ok (incl. changed), changed, failed,
        skipped, unreachable."""
        run = self.node(name)
        counts = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0}
        if run.status == "unreachable" and not run.plan:
            counts["unreachable"] = 1
            return counts
        for change in run.outcomes():
            if change.status == "failed":
                counts["failed"] += 1
            elif change.status in ("skipped", "pending"):
                counts["skipped"] += 1
            else:
                counts["ok"] += 1
                if change.changed:
                    counts["changed"] += 1
        if run.status == "unreachable":
            counts["unreachable"] = 1
        elif run.status == "failed" and counts["failed"] == 0:
            counts["failed"] = 1
        return counts

    @property
    def changed(self) -> int:
        return sum(self.recap(run.node)["changed"] for run in self.nodes)

    @property
    def exit_code(self) -> int:
        """0 when every node is reachable and nothing failed (check mode: changes are fine)."""
        bad = any(self.recap(run.node)["failed"] or self.recap(run.node)["unreachable"]
                  for run in self.nodes)
        return 1 if bad else 0

    @property
    def bytes_moved(self) -> int:
        return sum(t.bytes_moved for t in self.transfers)


@dataclass
class _Prepared:
    """One node's rendered tasks, vars and queries."""

    node: Node
    context: dict[str, Any]
    tasks: dict[str, list[Task]]
    handlers: dict[str, list[Task]]
    queries: list[Query]
    images: dict[str, str]  # ref -> source tar ('' for none)
    python: str


def provision(inventory: Inventory, limit: str | Sequence[Node] | None = None, *,
              roles: str | Sequence[str] | None = None, check: bool = False,
              absent: bool = False, environ: Mapping[str, str] | None = None,
              on_event: Event | None = None, roles_dirs: tuple[Path, ...] | None = None,
              transfer_timeout: float = 3600.0, play: str = SITE_FILE,
              extra_vars: Mapping[str, Any] | None = None,
              on_progress: Progress | None = None) -> ProvisionReport:
    """Run roles (default: all of play's, site.yml's) on the selected nodes; see the
    module doc.

    roles_dirs: where the roles are looked up (default: the inventory's, then the shipped).
    extra_vars: vars the caller computed (above the inventory's, below the node's identity).

    check: plan only, change nothing. absent: remove what the roles write (unprovision).
    environ: where HF_TOKEN comes from (default os.environ). on_event(name, report) is
    called at "planned" (before any change), "applied" and "done". on_progress: each
    node's copy of an image as it goes (transfer.images.distribute).
    """
    started = time.monotonic()
    loaded = load_roles(roles, roles_dirs or roles_path(inventory.path), play)
    nodes = inventory.select(limit) if limit is None or isinstance(limit, str) else tuple(limit)
    report = ProvisionReport(check=check, absent=absent, roles=tuple(r.name for r in loaded),
                             nodes=[NodeRun(n.name, n.rank) for n in nodes])
    renderer = Renderer()
    source = os.environ if environ is None else environ
    prepared = {n.name: _prepare(inventory, n, loaded, renderer, source, extra_vars)
                for n in nodes}
    wanted = {ref: tar for p in prepared.values() for ref, tar in p.images.items()}
    head = inventory.head
    needs_head = (not absent and any(not tar for tar in wanted.values())
                  and head.name not in prepared)
    fleet_nodes = [*nodes, head] if needs_head else list(nodes)
    emit = on_event or (lambda name, rep: None)
    with Fleet(inventory, fleet_nodes) as fleet:
        facts = _gather(fleet, prepared, report, head if needs_head else None)
        targets = _resolve(wanted, facts, inventory, absent)
        _plan_all(loaded, prepared, facts, targets, report, renderer, absent, first=True)
        emit("planned", report)
        todo = [run for run in report.nodes if run.status == "ok"]
        if not check and any(run.changes or run.refreshes for run in todo):
            _apply_all(fleet, prepared, report, targets, transfer_timeout, on_progress)
            emit("applied", report)
        if not check and any(run.changes for run in todo):  # a refresh changes no fact
            _replan(fleet, loaded, prepared, report, renderer, absent, wanted, inventory,
                    head if needs_head else None)
            stale = [run for run in report.nodes if run.status == "ok"
                     and any(c.changed for c in run.final or [])]
            if stale:
                _apply_second(fleet, stale)
                _replan(fleet, loaded, prepared, report, renderer, absent, wanted, inventory,
                        head if needs_head else None)
            for run in report.nodes:
                if run.status == "ok" and any(c.changed or c.status == "failed"
                                              for c in run.final or []):
                    run.status = "failed"
    report.seconds = time.monotonic() - started
    emit("done", report)
    return report


def _prepare(inventory: Inventory, node: Node, roles: tuple[Role, ...], renderer: Renderer,
             environ: Mapping[str, str], extra: Mapping[str, Any] | None) -> _Prepared:
    context = node_vars(inventory, node, roles, environ, extra)
    tasks = {role.name: render_tasks(role, role.tasks, context, renderer) for role in roles}
    handlers = {role.name: render_tasks(role, role.handlers, context, renderer)
                for role in roles}
    every = [t for group in (*tasks.values(), *handlers.values()) for t in group]
    return _Prepared(node, context, tasks, handlers, queries(every),
                     docker_image.sources(every), docker_image.relay_python(every, DEFAULT_PYTHON))


def _gather(fleet: Fleet, prepared: Mapping[str, _Prepared], report: ProvisionReport,
            head: Node | None) -> dict[str, ProvisionFacts]:
    """One round trip per node; unreachable and failed nodes are marked in the report."""
    commands = {name: gather_argv(p.queries) for name, p in prepared.items()}
    plans = {name: p.queries for name, p in prepared.items()}
    if head is not None:
        commands[head.name] = gather_argv([IMAGES])
        plans[head.name] = [IMAGES]
    results = fleet.run(commands)
    facts: dict[str, ProvisionFacts] = {}
    for result in results:
        if result.ok:
            facts[result.node] = parse_facts(result.stdout, plans[result.node])
            continue
        if result.node not in prepared:
            continue  # the head, only asked for its images: resolution will say so
        run = report.node(result.node)
        run.status = result.status if result.status == "unreachable" else "failed"
        run.error = result.error or result.status
    for name, node_facts in facts.items():
        if name in prepared:
            report.node(name).facts = node_facts
    return facts


def _resolve(wanted: Mapping[str, str], facts: Mapping[str, ProvisionFacts], inventory: Inventory,
             absent: bool) -> dict[str, ImageTarget]:
    if absent or not wanted:
        return {}
    return resolve_images(wanted, facts, [n.name for n in inventory.nodes], inventory.head.name)


def _plan_all(roles: tuple[Role, ...], prepared: Mapping[str, _Prepared],
              facts: Mapping[str, ProvisionFacts], targets: Mapping[str, ImageTarget],
              report: ProvisionReport, renderer: Renderer, absent: bool, *,
              first: bool) -> None:
    for run in report.nodes:
        if run.node not in facts:
            if first:
                run.plan = []
            continue
        p = prepared[run.node]
        changes = plan_node(roles, p.tasks, p.handlers, p.context, facts[run.node],
                            renderer=renderer, absent=absent, images=targets,
                            user=p.node.user, secrets=secret_values(p.context))
        if first:
            run.plan = changes
            if any(c.status == "failed" for c in changes):
                run.status = "failed"
        else:
            run.final = changes


def _replan(fleet: Fleet, roles: tuple[Role, ...], prepared: Mapping[str, _Prepared],
            report: ProvisionReport, renderer: Renderer, absent: bool,
            wanted: Mapping[str, str], inventory: Inventory, head: Node | None) -> None:
    """Gather the reachable nodes' facts again and plan again: each run's `final`."""
    again = [run for run in report.nodes if run.status != "unreachable"]
    facts = _gather(fleet, {r.node: prepared[r.node] for r in again}, report, head)
    targets = _resolve(wanted, facts, inventory, absent)
    _plan_all(roles, prepared, facts, targets, report, renderer, absent, first=False)


def _apply_second(fleet: Fleet, runs: Sequence[NodeRun]) -> None:
    """Apply each run's re-plan once more (files and commands; an image still missing is
    left to the verdict)."""
    def one(run: NodeRun) -> None:
        run.second = run.final
        run.applied_second = apply_node(fleet, run.node, run.second)
        if run.applied_second.status != "ok":
            run.status = run.applied_second.status
            run.error = run.applied_second.error

    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        list(pool.map(one, runs))


def _apply_all(fleet: Fleet, prepared: Mapping[str, _Prepared], report: ProvisionReport,
               targets: Mapping[str, ImageTarget], transfer_timeout: float,
               on_progress: Progress | None = None) -> None:
    todo = [run for run in report.nodes if run.plan and run.status != "unreachable"
            and (run.changes or run.refreshes)]

    def one(run: NodeRun) -> None:
        run.applied = apply_node(fleet, run.node, run.plan)
        if run.applied.status != "ok":
            run.status = run.applied.status
            run.error = run.applied.error

    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
        list(pool.map(one, todo))
    by_ref: dict[str, list[tuple[NodeRun, int]]] = {}
    for run in todo:
        if run.status == "unreachable" or (run.applied and run.applied.errors):
            continue
        for index, change in enumerate(run.plan):
            if change.changed and any(isinstance(a, Transfer) for a in change.actions):
                ref = next(a.ref for a in change.actions if isinstance(a, Transfer))
                by_ref.setdefault(normalize_ref(ref), []).append((run, index))
    for ref, wanted in by_ref.items():
        target = targets[ref]
        nodes = [prepared[run.node].node for run, _ in wanted]
        python = prepared[wanted[0][0].node].python
        transfer = distribute(fleet, target, nodes, python=python, timeout=transfer_timeout,
                              on_progress=on_progress)
        report.transfers.append(transfer)
        for run, index in wanted:
            error = transfer.errors.get(run.node)
            if error is None:
                run.applied.applied.add(index)
                continue
            run.applied.errors[index] = error
            if run.node in transfer.unreachable:
                run.status, run.error = "unreachable", error
            elif run.status == "ok":
                run.status, run.error = "failed", error
