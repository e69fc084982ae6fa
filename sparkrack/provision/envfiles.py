"""What the engines run with: the env files roles nccl_env and engine_env write, per node,
each variable with its `# source of VAR` line; read back as gathered (`EnvFiles.read`) or
rendered from the inventory (`inventory_view`) (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping
from sparkrack.facts.provision import ProvisionFacts, parse_facts
from sparkrack.facts.queries import Query, argv
from sparkrack.provision.changes import Put
from sparkrack.provision.modules import assert_, template
from sparkrack.provision.plan import plan_node, queries
from sparkrack.provision.roles import (
    Renderer, RenderError, Task, load_roles, node_vars, render_tasks, roles_path)

TEMPLATE = template.MODULE.name  # the tasks that write the env files
CHECK = assert_.MODULE.name  # the role checks (an HCA missing or down)

ENV_ROLES = ("nccl_env", "engine_env")
SECRET_KEYS = ("HF_TOKEN",)  # never in an env file; shown as *** if one holds it
VIEW_NODE = "node"
VIEW_INVENTORY = "inventory"
_SOURCE = re.compile(r"^# source of ([A-Za-z_][A-Za-z0-9_]*): (.*)$")


@dataclass(frozen=True)
class EnvVar:
    """One variable a rank gets: its value, where the value came from, and its file."""

    value: str = field(repr=False)
    source: str
    file: str = ""  # the env file on the node ('' for the profile's own variables)


@dataclass(frozen=True)
class NodeEnv:
    """A node's engine environment in one view (VIEW_NODE or VIEW_INVENTORY)."""

    node: str
    view: str
    vars: FrozenMapping  # name -> EnvVar, in file order
    problems: tuple[str, ...] = ()
    # (file, written, probed now) when the one problem is a GID index the node's table no
    # longer has there (it moved at a boot): rewriting the file as provision would fixes it
    gid_moved: tuple[str, str, str] | None = None


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (docker --env-file format: values literal, # comments)."""
    env = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        env[key.strip()] = value
    return env


def parse_sources(text: str) -> dict[str, str]:
    """{VAR: source} from the `# source of VAR: ...` lines of an env file."""
    return {m.group(1): m.group(2).strip() for m in map(_SOURCE.match, text.splitlines()) if m}


def env_vars(text: str, file: str) -> dict[str, EnvVar]:
    """The variables of one env file with their sources ('unknown' when a line has none)."""
    sources = parse_sources(text)
    return {key: EnvVar(value, sources.get(key, f"{file} (no source line)"), file)
            for key, value in parse_env(text).items()}


class EnvFiles:
    """The env files one engine's ranks read (nccl_env's, and engine_env's for the engine's
    image key), their gathering, their judging and their rendering per node."""

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
                found.update(env_vars(texts[path], path))
        token = next((found[key].value for key in SECRET_KEYS if key in found), "")
        context, tasks = self._tasks(node)
        moved = None
        for change in plan_node(self.roles, tasks, {}, context, facts, renderer=self.renderer,
                                user=node.user, secrets=[token]):
            if change.status == "failed":
                problems.append(f"{change.role}: {change.summary}")
            elif change.changed and change.module == TEMPLATE:
                path = change.summary.split(":", 1)[0]
                if path in texts:
                    problems.append(_drift(path, texts[path], change))
                    moved = _gid_moved(path, texts[path], change)
        return NodeEnv(node.name, VIEW_NODE, FrozenMapping(found), tuple(problems),
                       moved if len(problems) == 1 else None)

    def inventory_view(self, node: Node) -> NodeEnv:
        """The environment provision would write on node, rendered here (no node contacted)."""
        context, tasks = self._tasks(node)
        offline = {**context, "facts": ProvisionFacts(), "offline_view": True}
        found: dict[str, EnvVar] = {}
        problems = []
        for role in self.roles:
            for task in tasks[role.name]:
                if task.module != TEMPLATE:
                    continue
                try:
                    if task.error:
                        raise RenderError(task.error)
                    text = self.renderer.template(role, str(task.params["src"]), offline)
                except RenderError as error:
                    problems.append(f"{role.name}: {error}")
                    continue
                found.update(env_vars(text, str(task.params["dest"])))
        return NodeEnv(node.name, VIEW_INVENTORY, FrozenMapping(found), tuple(problems))

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
        """inventory_view of every node of the inventory."""
        return {node.name: self.inventory_view(node) for node in self.inventory.nodes}


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


def _gid_moved(path: str, text: str, change) -> tuple[str, str, str] | None:
    """(path, written, probed) when the GID index is the one value that differs between the
    node's file and what provision would write now from the node's GID table."""
    put = next((a for a in change.actions if isinstance(a, Put)), None)
    if put is None or change.role != "nccl_env":
        return None
    have, want = parse_env(text), parse_env(put.content.decode(errors="replace"))
    differ = {key for key in {*have, *want} if have.get(key) != want.get(key)}
    if differ != {GID_KEY} or "probed on the node" not in parse_sources(
            put.content.decode(errors="replace")).get(GID_KEY, ""):
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


def secret_names(env: Mapping[str, EnvVar], declared: Sequence[str]) -> frozenset[str]:
    """The variables of env whose values are never shown."""
    return frozenset(key for key in env if key in declared or key in SECRET_KEYS)
