"""Roles as folders of data, the way Ansible lays them out, loaded and checked (the shipped
roles or the inventory's `.sparkrack/roles/` first), and their tasks rendered per node
(renderer.py renders; roletasks.py holds the data; docs/provisioning.md#writing-a-role).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import search_dirs, shipped
from sparkrack.engineenv import EngineEnv
from sparkrack.facts.roce import node_fabric
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory import read_yaml as read_bounded_yaml
from sparkrack.inventory.schema import describe, plain
from sparkrack.inventory.watchdog_record import node_vars as watchdog_vars
from sparkrack.provision.modules import REGISTRY, Module
from sparkrack.provision.modules.params import check_params, templated, with_defaults
from sparkrack.provision.renderer import Renderer, RenderError
from sparkrack.provision.roletasks import Role, RoleError, Task, TaskDef, rendered

ROLES_DIR = shipped("roles")
SITE_FILE = "site.yml"
TASK_KEYS = frozenset({"name", "notify", "when", "loop"})


# --- Loading ---------------------------------------------------------------------------


def roles_path(inventory_dir: Path | None = None) -> tuple[Path, ...]:
    """The folders roles are looked up in, first match wins: the inventory's
    `.sparkrack/roles/` when it has one, then the shipped roles."""
    return search_dirs(inventory_dir, "roles")


def _find(search: tuple[Path, ...], name: str) -> Path:
    """The first search folder's entry called name (site.yml or a role folder)."""
    for folder in search:
        if (folder / name).exists():
            return folder / name
    raise RoleError(f"{name}: not in {' or '.join(str(folder) for folder in search)}",
                    fix="restore it, or take it out of site.yml")


def site_roles(search: tuple[Path, ...] = (ROLES_DIR,), play: str = SITE_FILE
               ) -> tuple[str, ...]:
    """The role names of a play file (site.yml: what `invoke provision` runs), in order."""
    file = _find(search, play)
    data = _read_yaml(file)
    names = data.get("roles") if isinstance(data, Mapping) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RoleError(f"{file}: expected `roles: [name, ...]`", fix="list the role folders")
    return tuple(names)


def load_roles(names: str | list[str] | tuple[str, ...] | None = None,
               search: tuple[Path, ...] = (ROLES_DIR,), play: str = SITE_FILE
               ) -> tuple[Role, ...]:
    """The named roles of play (comma-separated or a list; default: all of them), read and
    checked, each from the first folder of search that has it."""
    every = site_roles(search, play)
    if names is None:
        wanted = list(every)
    else:
        parts = names.split(",") if isinstance(names, str) else list(names)
        wanted = [name.strip() for name in parts if name.strip()]
        unknown = [name for name in wanted if name not in every]
        if unknown or not wanted:
            raise UsageError(f"unknown role '{', '.join(unknown) or names}'",
                             fix="roles: " + ", ".join(every))
        wanted = [name for name in every if name in wanted]  # site order
    return tuple(load_role(_find(search, name)) for name in wanted)


def load_role(path: Path) -> Role:
    """One role folder."""
    name = path.name
    if not (path / "tasks" / "main.yml").is_file():
        raise RoleError(f"{path}: no tasks/main.yml", fix="a role folder holds tasks/main.yml")
    defaults = _read_yaml(path / "defaults" / "main.yml") if (
        path / "defaults" / "main.yml").is_file() else {}
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, Mapping):
        raise RoleError(f"{path}/defaults/main.yml: expected a mapping of variables",
                        fix="write one name: value per line")
    tasks = _task_list(path / "tasks" / "main.yml", name, handler=False)
    handlers_file = path / "handlers" / "main.yml"
    handlers = _task_list(handlers_file, name, handler=True) if handlers_file.is_file() else ()
    known = {h.name for h in handlers}
    for task in tasks:
        for target in task.notify:
            if target not in known:
                raise RoleError(f"{task.where}: notifies unknown handler '{target}'",
                                fix=f"handlers of {name}: {', '.join(sorted(known)) or 'none'}")
    return Role(name, path, dict(defaults), tasks, handlers)


def _read_yaml(file: Path) -> Any:
    """A role file, read with the inventory's limits (size, aliases, duplicate keys)."""
    try:
        return read_bounded_yaml(file)
    except InventoryError as error:
        raise RoleError(error.message, fix=error.fix) from None


def _task_list(file: Path, role: str, *, handler: bool) -> tuple[TaskDef, ...]:
    data = _read_yaml(file)
    if data is None:
        return ()
    if not isinstance(data, list):
        raise RoleError(f"{file}: expected a list of tasks", fix="start each task with '- name:'")
    return tuple(_task(file, role, index, entry, handler) for index, entry in enumerate(data, 1))


def shown(file: Path) -> str:
    """A role file as the operator names it: relative to the working directory when it is
    under it (roles/clock_cap/tasks/main.yml from the checkout), else whole."""
    try:
        return str(file.relative_to(Path.cwd()))
    except ValueError:
        return str(file)


def _task(file: Path, role: str, index: int, entry: Any, handler: bool) -> TaskDef:
    if not isinstance(entry, Mapping):
        raise RoleError(f"{shown(file)}: task {index}: expected a mapping",
                        fix="- name: ...\\n  <module>: {...}")
    lines = getattr(entry, "lines", {})

    def at(key: Any = None, line: int | None = None) -> str:
        """file:line: the line given, else the task's key's, else the task's first."""
        line = line or lines.get(key) or min(lines.values(), default=None)
        return f"{shown(file)}:{line}" if line else f"{shown(file)}: task {index}"

    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RoleError(f"{at()}: every task needs a name", fix="add name: what it ensures")
    module, params = _module_params(entry, at)
    notify = entry.get("notify", ())
    notify = (notify,) if isinstance(notify, str) else tuple(notify or ())
    if handler and notify:
        raise RoleError(f"{at('notify')}: a handler cannot notify", fix="remove notify")
    when = entry.get("when")
    if when is not None and not isinstance(when, str):
        when = json.dumps(when)
    return TaskDef(role=role, name=name, module=module.name, params=params, notify=notify,
                   when=when, loop=entry.get("loop"), handler=handler, where=at("notify"))


def _module_params(entry: Mapping[str, Any], at: Callable[..., str]
                   ) -> tuple[Module, dict[str, Any]]:
    """The task's one module and its parameters, checked against the module's declarations
    (modules/params.py), with their defaults; a mistake is named at its own line."""
    modules = [key for key in entry if key in REGISTRY]
    unknown = [key for key in entry if key not in REGISTRY and key not in TASK_KEYS]
    if unknown:
        raise RoleError(f"{at(unknown[0])}: unknown key '{unknown[0]}'",
                        fix=f"modules: {', '.join(REGISTRY)}; task keys: "
                        f"{', '.join(sorted(TASK_KEYS))}")
    if len(modules) != 1:
        raise RoleError(f"{at()}: needs exactly one module, has {len(modules)}",
                        fix=f"one of: {', '.join(REGISTRY)}")
    module = REGISTRY[modules[0]]
    given = entry[module.name]
    if not isinstance(given, Mapping):
        required = sorted(n for n, p in module.params.items() if p.required)
        raise RoleError(f"{at(module.name)}: {module.name} takes a mapping of parameters",
                        fix=f"{module.name}: {{{', '.join(required)}: ...}}")
    wrong = check_params(module.params, given, module.name)
    if wrong:
        raise RoleError(f"{at(module.name, wrong.line)}: {wrong.message}", fix=wrong.fix)
    invalid = module.check(given)
    if invalid:
        problem, fix = invalid
        raise RoleError(f"{at(module.name)}: {problem}", fix=fix)
    return module, with_defaults(module.params, given)


# --- Per node --------------------------------------------------------------------------


def node_vars(inventory: Inventory, node: Node, roles: tuple[Role, ...],
              environ: Mapping[str, str], extra: Mapping[str, Any] | None = None
              ) -> dict[str, Any]:
    """The vars a node's tasks see: role defaults < inventory vars < the caller's extra
    vars < the node's identity.

    `hf_token` comes from the operator's environment (HF_TOKEN), never from a file;
    `watchdog_pubkey` / `watchdog_from` from the watchdog key record beside the inventory
    (sparkrack/inventory/watchdog_record.py; '' and [] when none). `fabric` maps each
    cabled function to its netdev and fabric address (facts/roce.py's fabric_addresses);
    `engine_env` is the node's engine environment, computed (sparkrack/engineenv: what
    roles nccl_env and engine_env write).
    """
    result: dict[str, Any] = {}
    for role in roles:
        result.update(plain(role.defaults))
    result.update({f.name: plain(getattr(node.vars, f.name)) for f in fields(node.vars)})
    result.update(watchdog_vars(inventory.path))
    result.update(extra or {})
    result.update(node=node.name, rank=node.rank, address=node.address,
                  roce_addr=node.roce_addr, roce_twin_addr=node.roce_twin_addr or "",
                  head=inventory.head.name, hf_token=environ.get("HF_TOKEN", ""),
                  fabric=node_fabric(node), engine_env=EngineEnv(inventory, node))
    return result


def secret_values(context: Mapping[str, Any]) -> list[str]:
    """The values a node's context holds that no summary or diff may show: the Hugging Face
    token, and any the caller declared in extra var `secret_values` (the PDU's keys)."""
    return [v for v in (context.get("hf_token"), *context.get("secret_values", ())) if v]


def render_tasks(role: Role, defs: tuple[TaskDef, ...], context: Mapping[str, Any],
                 renderer: Renderer) -> list[Task]:
    """The role's task definitions rendered with context (loops expanded)."""
    tasks: list[Task] = []
    for task in defs:
        if task.loop is None:
            tasks.append(_render(task, context, renderer))
            continue
        try:
            items = renderer.value(task.loop, context)
        except RenderError as error:
            tasks.append(rendered(task, params={}, error=f"loop: {error}"))
            continue
        if isinstance(items, Mapping):
            items = [{"key": k, "value": v} for k, v in items.items()]
        for item in items or []:
            tasks.append(_render(task, {**context, "item": item}, renderer, item))
    return tasks


def _render(task: TaskDef, context: Mapping[str, Any], renderer: Renderer,
            item: Any = None) -> Task:
    try:
        name = str(renderer.value(task.name, context))
    except RenderError:
        name = task.name
    module = REGISTRY[task.module]
    try:
        values = {key: value if key in module.late else renderer.value(value, context)
                  for key, value in task.params.items()}
    except RenderError as error:
        return rendered(task, name=name, params={}, item=item, error=str(error))
    for key, raw in task.params.items():  # what a template made is checked now, per node
        wrong = None if key in module.late or not templated(raw) else (
            module.params[key].problem(key, values[key]))
        if wrong:
            error = f"{wrong.message} (rendered from {describe(raw)})"
            return rendered(task, name=name, params={}, item=item, error=error)
    return rendered(task, name=name, params=values, item=item)
