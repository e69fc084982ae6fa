"""The env files roles nccl_env and engine_env write, per node, gathered and judged: read
back as gathered (`EnvFiles.read`: sparkrack/engineenv/drift.py compares each file's
variables with the ones computed from the same facts; no role is rendered) or the
inventory's view (`inventory_views`, engineenv's, no node read); a GID index that moved
at a boot, nccl.env's one problem, rewritten by role nccl_env, the file's one writer
(`EnvFiles.rewrite_moved`) (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.engineenv import EngineEnv, NodeEnv, drift, inventory_views
from sparkrack.facts.provision import ProvisionFacts, parse_facts
from sparkrack.facts.queries import Query, argv
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.oplock.audit import note


class EnvFiles:
    """The env files one engine's ranks read (nccl_env's, and engine_env's for the engine's
    image key), gathered and judged per node."""

    def __init__(self, inventory: Inventory, engine_key: str):
        self.inventory = inventory
        self.engine_key = engine_key
        self._envs: dict[str, EngineEnv] = {}

    def env(self, node: Node) -> EngineEnv:
        """The node's engine environment (one per node: its GID choice is made once)."""
        if node.name not in self._envs:
            self._envs[node.name] = EngineEnv(self.inventory, node)
        return self._envs[node.name]

    def files(self, node: Node) -> list[str]:
        """The node's env files for this engine, in the order they are merged."""
        return self.env(node).files(self.engine_key)

    def queries(self, node: Node) -> list[Query]:
        """What a round trip asks to learn everything `read` needs about node."""
        return drift.queries(self.env(node), self.engine_key)

    def read(self, node: Node, facts: ProvisionFacts) -> NodeEnv:
        """The node's environment from the facts of a round trip that asked queries(node),
        with its problems."""
        return drift.judge(self.env(node), self.engine_key, facts)

    def read_all(self, fleet: Fleet, nodes: Sequence[Node] | None = None,
                 timeout: float = 20) -> tuple[dict[str, NodeEnv], dict[str, str]]:
        """({node: NodeEnv} read from each node of fleet (or of nodes), {node: error} for
        those that did not answer): one round trip per node."""
        nodes = {node.name: node for node in (fleet.nodes if nodes is None else nodes)}
        asked = {name: self.queries(node) for name, node in nodes.items()}
        results = fleet.run({name: argv(asked[name]) for name in nodes}, timeout=timeout)
        envs = {r.node: self.read(nodes[r.node], parse_facts(r.stdout, asked[r.node]))
                for r in results if r.ok}
        return envs, {r.node: r.error or r.status for r in results if not r.ok}

    def rewrite_moved(self, fleet: Fleet, env: dict[str, NodeEnv]) -> tuple[list[str], list[str]]:
        """Provision role nccl_env, nccl.env's one writer, on every node of env whose one
        problem is a GID index that moved at a boot (drift.judge says which: NodeEnv.gid_moved),
        as `up` does before a start; (what was done, one line a node; the problems of nodes
        where it failed). env is updated in place with those nodes' files read again."""
        from sparkrack.provision.runner import provision  # the roles' Jinja2: only then

        found = {name: e.gid_moved for name, e in env.items() if e.gid_moved}
        if not found:
            return [], []
        nodes = [self.inventory.node(name) for name in found]
        report = provision(self.inventory, nodes, roles="nccl_env")
        failed = [f"{run.node}: rewriting its NCCL env file failed: {run.error or run.status}"
                  for run in report.nodes if run.status != "ok"]
        done = [f"{name}: NCCL_IB_GID_INDEX {written} -> {probed} (its GID table moved, as "
                f"at a boot; {path} rewritten as provision would)"
                for name, (path, written, probed) in found.items()
                if name not in {line.split(":", 1)[0] for line in failed}]
        if done:
            note(gid_moved={name: f"{w} -> {p}" for name, (_, w, p) in found.items()},
                 files=[f"{path}@{name}" for name, (path, _, _) in found.items()])
        read, lost = self.read_all(fleet, nodes)
        env.update(read)
        return done, failed + [f"{name}: {why}" for name, why in lost.items()]

    def inventory_views(self) -> dict[str, NodeEnv]:
        """Every node's environment as the inventory says it (engineenv's, no node read)."""
        return inventory_views(self.inventory, self.engine_key)


@dataclass(frozen=True)
class RackView:
    """Every node's environment for `invoke plan`: read from the nodes that answered,
    the inventory's view for the others (and for all with offline)."""

    envs: dict[str, NodeEnv]
    unreachable: dict[str, str]  # node -> why it was not read
    offline: bool = False  # not asked: every node shows the inventory's view

    @property
    def problems(self) -> list[str]:
        return [f"{name}: {p}" for name, env in self.envs.items() for p in env.problems]


def rack_view(inventory: Inventory, engine_key: str, *, offline: bool = False) -> RackView:
    """What every rank would run with now (see RackView); never raises for a dead node."""
    files = EnvFiles(inventory, engine_key)
    envs = files.inventory_views()
    if offline:
        return RackView(envs, {}, offline=True)
    try:
        with Fleet(inventory) as fleet:
            read, unreachable = files.read_all(fleet)
    except SparkrackError as error:
        return RackView(envs, {node.name: error.line() for node in inventory.nodes})
    return RackView({**envs, **read}, unreachable)
