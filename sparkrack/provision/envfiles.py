"""The env files roles nccl_env and engine_env write, per node, gathered and judged: read
back as gathered (`EnvFiles.read`, each variable's source computed by sparkrack/engineenv
from the same facts) or the inventory's view (`inventory_views`, engineenv's, no node
read) (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.engineenv import (
    SECRET_KEYS,
    VIEW_NODE,
    EngineEnv,
    EnvVar,
    GidIndex,
    NodeEnv,
    inventory_views,
    parse_env,
    read_vars,
)
from sparkrack.facts.provision import ProvisionFacts, parse_facts
from sparkrack.facts.queries import Query, argv
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping
from sparkrack.provision.changes import Put
from sparkrack.provision.modules import assert_, template
from sparkrack.provision.plan import plan_node, queries
from sparkrack.provision.roles import (
    Renderer,
    Task,
    load_roles,
    node_vars,
    render_tasks,
    roles_path,
)

TEMPLATE = template.MODULE.name  # the tasks that write the env files
CHECK = assert_.MODULE.name  # the role checks (an HCA missing or down)

ENV_ROLES = ("nccl_env", "engine_env")


class EnvFiles:
    """The env files one engine's ranks read (nccl_env's, and engine_env's for the engine's
    image key), gathered and judged per node."""

    def __init__(self, inventory: Inventory, engine_key: str):
        self.inventory = inventory
        self.engine_key = engine_key
        self.roles = load_roles(list(ENV_ROLES), roles_path(inventory.path))
        self.renderer = Renderer()

    def _tasks(self, node: Node) -> tuple[dict, dict[str, list[Task]]]:
        """The node's vars and the tasks that matter for this engine: every check, and the
        templates of nccl_env and of this engine's file."""
        context = node_vars(self.inventory, node, self.roles, {})
        tasks = {role.name: [t for t in render_tasks(role, role.tasks, context, self.renderer)
                             if t.module == CHECK or (t.module == TEMPLATE and
                                                      t.item in (None, self.engine_key))]
                 for role in self.roles}
        return context, tasks

    def files(self, node: Node) -> list[str]:
        """The node's env files for this engine, in the order they are merged."""
        return _dests(self._tasks(node)[1])

    def queries(self, node: Node) -> list[Query]:
        """What a round trip asks to learn everything `read` needs about node."""
        _, tasks = self._tasks(node)
        return queries([t for group in tasks.values() for t in group])

    def read(self, node: Node, facts: ProvisionFacts) -> NodeEnv:
        """The node's environment from the facts of a round trip that asked queries(node),
        with its problems."""
        _, tasks = self._tasks(node)
        env = EngineEnv(self.inventory, node)
        computed = env.variables(self.engine_key, facts.roce)
        problems: list[str] = []
        found: dict[str, EnvVar] = {}
        texts: dict[str, str] = {}
        for path in _dests(tasks):
            current = facts.file(path)
            if not current.exists:
                problems.append(f"{path} missing")
            elif current.type != "file" or current.content is None:
                problems.append(f"{path} unreadable ({current.type or 'not a file'}, "
                                f"{current.size} bytes)")
            else:
                texts[path] = current.content.decode(errors="replace")
                found.update(read_vars(texts[path], path, computed))
        token = next((found[key].value for key in SECRET_KEYS if key in found), "")
        context, tasks = self._tasks(node)
        moved = None
        for change in plan_node(self.roles, tasks, {}, context, facts, renderer=self.renderer,
                                user=node.user, secrets=[token]):
            if change.status == "failed":
                problems.append(f"{change.role}: {change.summary}")
            elif change.warning:  # works, but not as the inventory means it (an HCA missing)
                problems.append(f"{change.role}: {change.warning}")
            elif change.changed and change.module == TEMPLATE:
                path = change.summary.split(":", 1)[0]
                if path in texts:
                    problems.append(_drift(path, texts[path], change))
                    moved = _gid_moved(path, texts[path], change, env.gid(facts.roce))
        return NodeEnv(node.name, VIEW_NODE, FrozenMapping(found), tuple(problems),
                       moved if len(problems) == 1 else None)


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


def _dests(tasks: Mapping[str, list[Task]]) -> list[str]:
    """The env files the template tasks write, in role order (the order they merge in)."""
    return [str(t.params["dest"]) for group in tasks.values() for t in group
            if t.module == TEMPLATE and not t.error]


def _drift(path: str, text: str, change) -> str:
    """One line naming what differs between a node's file and what provision would write."""
    put = next((a for a in change.actions if isinstance(a, Put)), None)
    if put is None:  # same content: attributes only
        return f"{path}: {change.summary.split(': ', 1)[-1]} (provision would fix it)"
    have, want = parse_env(text), parse_env(put.content.decode(errors="replace"))
    shown = [_shown(key, have.get(key), want.get(key))
             for key in dict.fromkeys([*want, *have]) if have.get(key) != want.get(key)]
    what = "; ".join(shown) if shown else "its comments differ"
    return f"{path} is not what provision would write now: {what}"


GID_KEY = "NCCL_IB_GID_INDEX"


def _gid_moved(path: str, text: str, change, gid: GidIndex) -> tuple[str, str, str] | None:
    """(path, written, probed) when the GID index is the one value that differs between the
    node's file and what provision would write now, and gid (computed from the same facts)
    says that index was read from the node's GID table."""
    put = next((a for a in change.actions if isinstance(a, Put)), None)
    if put is None or change.role != "nccl_env" or not gid.probed:
        return None
    have, want = parse_env(text), parse_env(put.content.decode(errors="replace"))
    differ = {key for key in {*have, *want} if have.get(key) != want.get(key)}
    if differ != {GID_KEY} or want[GID_KEY] != str(gid.index):
        return None
    return path, have.get(GID_KEY, ""), want[GID_KEY]


def _shown(key: str, have: str | None, want: str | None) -> str:
    if key in SECRET_KEYS:
        have, want = have and "***", want and "***"
    if have is None:
        return f"{key} missing (provision would write {want})"
    if want is None:
        return f"{key}={have} is not provision's"
    return f"{key} is {have}, provision would write {want}"

