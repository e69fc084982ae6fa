"""Load and validate an Ansible-style inventory directory into typed, frozen nodes.

An inventory is a directory with `hosts.yml`, `group_vars/<group>.yml` and
`host_vars/<node>.yml`. Vars merge in Ansible's order (what `ansible-inventory --list`
shows): `all: vars:` in hosts.yml < the group's `vars:` there < group_vars/all.yml <
group_vars/<group>.yml < the host's own entry in hosts.yml < host_vars/<node>.yml. Every
mistake raises InventoryError naming file:line and the fix.

A host with `spare: true` (and no rank) is a staged node outside the TP group, written by
`invoke onboard` without --replace: it is in `Inventory.spares`, not in `nodes`, groups,
ranks or tp_size, so nothing that operates the rack touches it.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import stat
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkrack.errors import InventoryError, UsageError
from sparkrack.inventory_schema import (
    CONNECTION, HOST, NODE, RACK, SPECS, FrozenMapping, RackVars, describe, is_address)

INVENTORY_ENV = "SPARKRACK_INVENTORY"
DEFAULT_INVENTORY = Path("inventory", "rack")  # the real rack's, in a checkout of the repo
MAX_FILE_BYTES = 1 << 20  # an inventory, profile or model file is a few KiB: 1 MiB is plenty
# values of one file with its aliases expanded (each one counted where it is used): a
# few hundred in a real file; nested aliases of aliases can stand for billions
MAX_YAML_VALUES = 100_000

_WHERE_FIX = f"pass -i/--inventory DIR or set {INVENTORY_ENV} to a directory holding hosts.yml"
_SHAPE_FIX = "shape: all: {children: {sparks: {hosts: {spark-01: {ansible_host: ADDR, rank: 0}}}}}"
_VARS_FIX = "write one key: value per line"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SCOPES = {  # which kinds of key each level may set
    "group": (RACK, NODE, CONNECTION),
    "subgroup": (NODE, CONNECTION),  # one group of several: rack vars would differ per node
    "host": (NODE, CONNECTION, HOST),
}
_MISPLACED = {
    RACK: ("'{key}' is a rack var and cannot be set {where}", "set it in group_vars/all.yml"),
    HOST: ("'{key}' belongs to one host and cannot be set {where}",
           "set it on each host in hosts.yml or host_vars/<node>.yml"),
}
_WHERE = {"group": "in group vars", "subgroup": "for one group of several", "host": "per host"}
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Node:
    """One node of the rack: how to reach it, its rank and its merged vars."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path | None
    rank: int  # -1 for a spare
    roce_addr: str
    vars: RackVars

    @property
    def is_head(self) -> bool:
        """Whether this node is rank 0: it serves HTTP and hosts dist-init."""
        return self.rank == 0


@dataclass(frozen=True)
class Inventory:
    """A validated inventory: nodes sorted by rank, rack vars and group membership."""

    path: Path
    nodes: tuple[Node, ...]
    vars: RackVars
    groups: Mapping[str, tuple[str, ...]]
    spares: tuple[Node, ...] = ()  # hosts with `spare: true`: staged, outside the TP group

    @property
    def head(self) -> Node:
        """The rank-0 node."""
        return self.nodes[0]

    @property
    def known_hosts_path(self) -> Path:
        """The known_hosts file, relative paths resolved against the inventory directory."""
        return _resolve(self.path, self.vars.known_hosts_file)

    @property
    def is_rehearsal(self) -> bool:
        """Whether this inventory describes the local rehearsal rack."""
        return self.vars.rehearsal

    def node(self, name: str) -> Node:
        """The node called name; UsageError naming the known nodes if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        names = [node.name for node in self.nodes]
        raise UsageError(f"unknown node '{name}'{_did_you_mean(name, names)}",
                         fix="known nodes: " + ", ".join(names))

    def select(self, limit: str | None) -> tuple[Node, ...]:
        """The nodes named by a --limit value (comma-separated nodes or groups), by rank."""
        if limit is None:
            return self.nodes
        wanted: set[str] = set()
        for entry in filter(None, (part.strip() for part in limit.split(","))):
            wanted.update(self._expand(entry))
        if not wanted:
            raise UsageError("--limit names no node", fix=self._limit_fix())
        return tuple(node for node in self.nodes if node.name in wanted)

    def _expand(self, entry: str) -> tuple[str, ...]:
        """The node names that one --limit entry stands for."""
        names = tuple(node.name for node in self.nodes)
        if entry == "all":
            return names
        if entry in self.groups:
            return self.groups[entry]
        if entry in names:
            return (entry,)
        choices = [*names, *self.groups, "all"]
        raise UsageError(f"unknown node '{entry}' in --limit{_did_you_mean(entry, choices)}",
                         fix=self._limit_fix())

    def _limit_fix(self) -> str:
        """The fix listing what --limit accepts."""
        return (f"valid: {', '.join(node.name for node in self.nodes)} "
                f"(or a group: {', '.join([*self.groups, 'all'])})")


def load_inventory(path: str | Path | None = None) -> Inventory:
    """Load and validate the inventory at path, else $SPARKRACK_INVENTORY, else
    ./inventory/rack."""
    return _Loader(_locate(path)).load()


def _locate(path: str | Path | None) -> Path:
    """The inventory directory to load; InventoryError if it or its hosts.yml is missing."""
    if path is not None:
        directory, origin = Path(path), ""
    elif os.environ.get(INVENTORY_ENV):
        directory, origin = Path(os.environ[INVENTORY_ENV]), f" (from {INVENTORY_ENV})"
    else:
        directory, origin = DEFAULT_INVENTORY, f" (the default: ./{DEFAULT_INVENTORY})"
    directory = directory.expanduser().absolute()
    if not directory.is_dir():
        problem = "not a directory" if directory.exists() else "inventory directory not found"
        raise InventoryError(directory, None, problem + origin, fix=_WHERE_FIX)
    hosts = directory / "hosts.yml"
    if hosts.is_dir():
        raise InventoryError(hosts, None, "a directory where the hosts file belongs",
                             fix="make hosts.yml the inventory's hosts file")
    if not hosts.is_file():
        raise InventoryError(directory, None, f"no hosts.yml in this directory{origin}",
                             fix=_WHERE_FIX)
    return directory


# --- YAML with line numbers ------------------------------------------------------------


class _Mapping(dict):
    """A YAML mapping that remembers its file and the line of each key."""

    def __init__(self, file: Path):
        super().__init__()
        self.file = file
        self.lines: dict[Hashable, int] = {}


def _read_yaml(file: Path) -> Any:
    """The content of a YAML file as plain values, with _Mapping for every mapping.

    A directory or anything but a regular file where the file belongs is refused, and so
    is a file over MAX_FILE_BYTES (read no further than that) or one that stands for over
    MAX_YAML_VALUES values with its aliases expanded (an "alias bomb", refused before
    anything walks it)."""
    limit = f"{MAX_FILE_BYTES // (1 << 20)} MiB"
    try:
        info = file.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InventoryError(file, None, "a directory where a file belongs",
                                 fix=f"put the {file.name} file there instead")
        if not stat.S_ISREG(info.st_mode):
            raise InventoryError(file, None, "not a regular file",
                                 fix=f"make {file.name} a plain file")
        if info.st_size > MAX_FILE_BYTES:
            raise InventoryError(file, None, f"{info.st_size:,} bytes, over the {limit} "
                                 "limit of an inventory file", fix="is it the right file? "
                                 "inventory and profile files are a few KiB")
        with open(file, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise InventoryError(file, None, f"over the {limit} limit of an inventory file",
                                 fix="is it the right file?")
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(file, None, "not UTF-8 text", fix="save it as UTF-8") from None
    except OSError as error:
        raise InventoryError(file, None, f"cannot read: {error.strerror}",
                             fix="make it a readable file") from None
    try:
        loader = yaml.SafeLoader(text)  # checks for unprintable characters
        try:
            root = loader.get_single_node()
            return None if root is None else _Converter(loader, file).value(root, None)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise InventoryError(file, mark.line + 1 if mark else None,
                             f"YAML syntax error: {error.problem or error.context}",
                             fix="correct the YAML at that line") from None
    except yaml.YAMLError as error:
        raise InventoryError(file, None, f"YAML error: {str(error).splitlines()[0]}",
                             fix="remove control characters from the file") from None
    except RecursionError:
        raise InventoryError(file, None, "YAML nested too deeply",
                             fix="flatten the structure") from None


class _Converter:
    """Turns composed YAML nodes into values, refusing duplicate keys and odd tags."""

    def __init__(self, loader: yaml.SafeLoader, file: Path):
        self.loader = loader
        self.file = file
        self.done: dict[int, Any] = {}  # node id -> value, so aliases convert once
        self.active: set[int] = set()  # nodes being converted, to catch recursive aliases
        self.sizes: dict[int, int] = {}  # collection node id -> its values, aliases expanded

    def value(self, node: yaml.Node, parent_key: Any) -> Any:
        """The value of node; parent_key names what holds it, for messages."""
        if isinstance(node, yaml.ScalarNode):
            return self.loader.construct_object(node)
        if id(node) in self.active:
            raise InventoryError(self.file, _line(node), "recursive YAML alias",
                                 fix="do not nest an anchor inside itself")
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise InventoryError(self.file, _line(node), f"unsupported YAML tag '{node.tag}'",
                                 fix="use plain mappings and lists")
        if id(node) not in self.done:
            self.active.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                self.done[id(node)] = [self.value(item, parent_key) for item in node.value]
                self._count(node, node.value)
            else:
                self.done[id(node)] = self._mapping(node, parent_key)
                self._count(node, [value for _, value in node.value])
            self.active.discard(id(node))
        return self.done[id(node)]

    def _count(self, node: yaml.Node, children: list[yaml.Node]) -> None:
        """Record how many values node stands for, refusing over MAX_YAML_VALUES."""
        size = 1 + sum(self.sizes.get(id(child), 1) for child in children)
        if size > MAX_YAML_VALUES:
            raise InventoryError(self.file, _line(node),
                                 f"YAML aliases expand to over {MAX_YAML_VALUES:,} values",
                                 fix="write the values out; do not nest aliases of aliases")
        self.sizes[id(node)] = size

    def _mapping(self, node: yaml.MappingNode, parent_key: Any) -> _Mapping:
        """A mapping node as a _Mapping; merge keys (<<) apply, duplicate keys are errors."""
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node)
            if key in first_lines:
                what = "host" if parent_key == "hosts" else "key"
                raise InventoryError(
                    self.file, _line(key_node),
                    f"duplicate {what} '{key}' (first at line {first_lines[key]})",
                    fix="keep one entry per node" if what == "host" else "keep one of them")
            first_lines[key] = _line(key_node)
        self.loader.flatten_mapping(node)
        result = _Mapping(self.file)
        for key_node, value_node in node.value:
            key = self._key(key_node)
            result[key] = self.value(value_node, key)
            result.lines[key] = _line(key_node)
        return result

    def _key(self, node: yaml.Node) -> Any:
        """A mapping key; only scalars are keys."""
        if not isinstance(node, yaml.ScalarNode):
            raise InventoryError(self.file, _line(node), "a key must be a plain name",
                                 fix="do not use a list or mapping as a key")
        return self.loader.construct_object(node)


def _line(node: yaml.Node) -> int:
    """The 1-based line where node starts."""
    return node.start_mark.line + 1


# --- Reading and checking an inventory -------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    """One var's checked value and where it was set."""

    value: Any
    file: Path
    line: int


_Settings = dict[str, _Setting]


@dataclass(frozen=True)
class _Host:
    """A host entry of hosts.yml with its inline vars."""

    name: str
    line: int
    settings: _Settings


@dataclass(frozen=True)
class _Group:
    """A group of hosts.yml with its inline vars."""

    name: str
    hosts_line: int
    hosts: tuple[_Host, ...]
    settings: _Settings


@dataclass(frozen=True)
class _Draft:
    """A host with its merged settings and its ansible_host and roce_addr, defaults applied."""

    host: _Host
    settings: _Settings
    addresses: dict[str, _Setting]

    def value(self, key: str) -> Any:
        """A merged var, or its schema default."""
        return self.settings[key].value if key in self.settings else SPECS[key].default


class _Loader:
    """Reads one inventory directory and checks it, file by file and then as a whole."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.hosts_file = directory / "hosts.yml"

    def load(self) -> Inventory:
        """Read every file, merge the vars and return the validated inventory."""
        inline, groups = self._read_hosts()
        hosts = [host for group in groups for host in group.hosts]
        if not hosts:
            raise InventoryError(self.hosts_file, None, "no hosts defined", fix=_SHAPE_FIX)
        group_files = self._var_files("group_vars", "group", ["all", *(g.name for g in groups)])
        host_files = self._var_files("host_vars", "node", [host.name for host in hosts])
        all_file = self._settings(group_files.get("all"), "group")
        level = _group_level(len(groups))
        rack, drafts = {**inline, **all_file}, []
        for group in groups:
            group_file = self._settings(group_files.get(group.name), level)
            shared = {**inline, **group.settings, **all_file, **group_file}  # Ansible's order
            if level == "group":
                rack = shared
            for host in group.hosts:
                own = self._settings(host_files.get(host.name), "host")
                drafts.append(self._draft(host, {**shared, **host.settings, **own}))
        anchor = groups[0].hosts_line
        spare_drafts = [draft for draft in drafts if self._is_spare(draft)]
        spares = {draft.host.name for draft in spare_drafts}
        members = [draft for draft in drafts if draft.host.name not in spares]
        if not members:
            raise InventoryError(self.hosts_file, anchor, "every host is a spare",
                                 fix="the rack needs its members: remove `spare: true`")
        self._check_ranks(members, anchor)
        self._check_tp_size(rack, len(members), anchor)
        self._check_unique(drafts, "ansible_host")
        self._check_unique(drafts, "roce_addr")
        nodes = sorted((self._node(draft) for draft in members), key=lambda node: node.rank)
        return Inventory(
            path=self.dir, nodes=tuple(nodes), vars=_rack_vars(rack),
            groups=FrozenMapping({g.name: tuple(h.name for h in g.hosts if h.name not in spares)
                                  for g in groups}),
            spares=tuple(self._node(draft) for draft in spare_drafts))

    def _is_spare(self, draft: _Draft) -> bool:
        """Whether a host is a spare; a spare with a rank is an error."""
        spare = draft.settings.get("spare")
        if spare is None or not spare.value:
            return False
        rank = draft.settings.get("rank")
        if rank is not None:
            raise InventoryError(
                rank.file, rank.line, f"spare host '{draft.host.name}' has a rank "
                f"(spare at {self._where(spare)})",
                fix="a spare is outside the TP group: remove its rank, or `spare: true`")
        return True

    def _read_hosts(self) -> tuple[_Settings, list[_Group]]:
        """The inline vars of `all` and the groups of hosts.yml."""
        file = self.hosts_file
        top = _mapping(_read_yaml(file), file, None, "", _SHAPE_FIX)
        _check_keys(top, ("all",))
        everything = _mapping(top.get("all"), file, top.lines.get("all"), "all", _SHAPE_FIX)
        _check_keys(everything, ("children", "vars"))
        children = _mapping(everything.get("children"), file, everything.lines.get("children"),
                            "children", _SHAPE_FIX)
        level = _group_level(len(children))
        groups, seen = [], {}
        for name, body in children.items():
            line = children.lines[name]
            _check_name(name, file, line, "group")
            group = _mapping(body, file, line, name, _SHAPE_FIX)
            _check_keys(group, ("hosts", "vars"))
            hosts_line = group.lines.get("hosts", line)
            hosts = _mapping(group.get("hosts"), file, hosts_line, "hosts", _SHAPE_FIX)
            members = tuple(self._read_host(hosts, host, name, seen) for host in hosts)
            groups.append(_Group(name, hosts_line, members,
                                 self._settings(self._vars(group), level)))
        return self._settings(self._vars(everything), "group"), groups

    def _read_host(self, hosts: _Mapping, name: Any, group: str,
                   seen: dict[str, tuple[str, int]]) -> _Host:
        """One host entry; a host already listed in another group is an error."""
        file, line = self.hosts_file, hosts.lines[name]
        _check_name(name, file, line, "host")
        if name in seen:
            other, other_line = seen[name]
            raise InventoryError(
                file, line, f"duplicate host '{name}' (also in group '{other}' at line "
                f"{other_line})", fix="list each node in one group only")
        seen[name] = (group, line)
        body = _mapping(hosts[name], file, line, name, _VARS_FIX)
        return _Host(name, line, self._settings(body, "host"))

    def _vars(self, owner: _Mapping) -> _Mapping | None:
        """The `vars` mapping of a hosts.yml entry, if it has one."""
        if "vars" not in owner:
            return None
        return _mapping(owner["vars"], self.hosts_file, owner.lines["vars"], "vars", _VARS_FIX)

    def _var_files(self, folder: str, kind: str, known: list[str]) -> dict[str, _Mapping]:
        """The mappings in group_vars/ or host_vars/ by name; stray files are errors."""
        directory = self.dir / folder
        if not directory.exists():
            return {}
        try:
            entries = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
        except OSError as error:
            raise InventoryError(directory, None, f"cannot read: {error.strerror}",
                                 fix=f"make {folder}/ a readable directory") from None
        found = {}
        for entry in entries:
            if entry.suffix == ".yml" and entry.is_dir():
                raise InventoryError(entry, None, f"a directory where a {kind} file belongs",
                                     fix=f"{folder}/ holds one <{kind}>.yml file per {kind}")
            if entry.suffix != ".yml" or not entry.is_file():
                raise InventoryError(entry, None, f"unexpected entry in {folder}/",
                                     fix=f"{folder}/ holds one <{kind}>.yml file per {kind}")
            if entry.stem not in known:
                backups = sorted(directory.glob(f".{entry.name}.replaced-by-*"))
                fix = (f"an onboarding that replaced {entry.stem} was cut before it removed "
                       f"this file; its backup is {backups[-1]}: delete {entry}"
                       if backups else
                       f"rename it after one of: {', '.join(known)}; or delete it")
                raise InventoryError(
                    entry, None, f"{folder} file for {kind} '{entry.stem}', which is not in "
                    f"hosts.yml{_did_you_mean(entry.stem, known)}", fix=fix)
            found[entry.stem] = _mapping(_read_yaml(entry), entry, None, "", _VARS_FIX)
        return found

    def _settings(self, mapping: _Mapping | None, level: str) -> _Settings:
        """The checked vars of one mapping set at level (group, subgroup or host)."""
        if mapping is None:
            return {}
        allowed = [name for name, spec in SPECS.items() if spec.scope in _SCOPES[level]]
        settings = {}
        for key, value in mapping.items():
            line = mapping.lines[key]
            spec = SPECS.get(key) if isinstance(key, str) else None
            if spec is None:
                raise _unknown_key(mapping.file, line, key, allowed)
            if spec.scope not in _SCOPES[level]:
                message, fix = _MISPLACED[spec.scope]
                raise InventoryError(mapping.file, line,
                                     message.format(key=key, where=_WHERE[level]), fix=fix)
            try:
                settings[key] = _Setting(spec.check(value), mapping.file, line)
            except ValueError as error:
                raise InventoryError(mapping.file, line, str(error), fix=spec.example()) from None
        return settings

    def _draft(self, host: _Host, settings: _Settings) -> _Draft:
        """A host with its merged settings; its name is its address unless one is set."""
        address = settings.get("ansible_host")
        if address is None:
            if not is_address(host.name):
                raise InventoryError(
                    self.hosts_file, host.line,
                    f"host name '{host.name}' is not an address to connect to",
                    fix="set ansible_host: ADDRESS for it")
            address = _Setting(host.name, self.hosts_file, host.line)
        return _Draft(host, settings, {"ansible_host": address,
                                       "roce_addr": settings.get("roce_addr", address)})

    def _check_ranks(self, drafts: list[_Draft], anchor: int) -> None:
        """Every node has a rank; ranks are unique, include the head and run 0..n-1."""
        count = len(drafts)
        by_rank: dict[int, tuple[str, _Setting]] = {}
        for draft in drafts:
            host = draft.host
            rank = draft.settings.get("rank")
            if rank is None:
                raise InventoryError(self.hosts_file, host.line, f"host '{host.name}' has no rank",
                                     fix=f"add rank: N with N in 0..{count - 1}, 0 for the head")
            if rank.value in by_rank:
                first, first_rank = by_rank[rank.value]
                raise InventoryError(
                    rank.file, rank.line, f"duplicate rank {rank.value}: {first} "
                    f"({self._where(first_rank)}) and {host.name} ({self._where(rank)})",
                    fix=f"give each node its own rank 0..{count - 1}")
            by_rank[rank.value] = (host.name, rank)
        if 0 not in by_rank:
            raise InventoryError(self.hosts_file, anchor, "no node has rank 0 (the head)",
                                 fix="give the head node rank: 0")
        for name, rank in by_rank.values():
            if rank.value >= count:
                raise InventoryError(
                    rank.file, rank.line,
                    f"rank {rank.value} of {name} is out of range 0..{count - 1}",
                    fix=f"number the {count} nodes 0..{count - 1}")

    def _check_tp_size(self, rack: _Settings, count: int, anchor: int) -> None:
        """tp_size equals the number of nodes."""
        tp_size = rack.get("tp_size", _Setting(SPECS["tp_size"].default, self.hosts_file, anchor))
        if tp_size.value != count:
            raise InventoryError(
                tp_size.file, tp_size.line,
                f"tp_size is {tp_size.value} but the inventory has {count} nodes",
                fix=f"set tp_size: {count} in group_vars/all.yml, or list {tp_size.value} nodes")

    def _check_unique(self, drafts: list[_Draft], key: str) -> None:
        """No two nodes share an ansible_host (and port) or a roce_addr, as key says."""
        seen: dict[tuple[str, int | None], _Draft] = {}
        for draft in drafts:
            setting = draft.addresses[key]
            port = draft.value("ansible_port") if key == "ansible_host" else None
            first = seen.setdefault((_normalized(setting.value), port), draft)
            if first is not draft:
                first_setting = first.addresses[key]
                raise InventoryError(
                    setting.file, setting.line, f"duplicate {key} {setting.value}: "
                    f"{first.host.name} ({self._where(first_setting)}) and {draft.host.name} "
                    f"({self._where(setting)})", fix=f"give each node its own {key}")

    def _node(self, draft: _Draft) -> Node:
        """The Node for one validated host."""
        key_file = draft.value("ansible_ssh_private_key_file")
        return Node(
            name=draft.host.name, address=draft.addresses["ansible_host"].value,
            port=draft.value("ansible_port"),
            user=draft.value("ansible_user"),
            key_file=_resolve(self.dir, key_file) if key_file else None,
            rank=-1 if draft.value("spare") else draft.value("rank"),
            roce_addr=draft.addresses["roce_addr"].value,
            vars=_rack_vars(draft.settings))

    def _where(self, setting: _Setting) -> str:
        """file:line of a setting, the file relative to the inventory directory."""
        return f"{setting.file.relative_to(self.dir)}:{setting.line}"


def _mapping(value: Any, file: Path, line: int | None, label: str, fix: str) -> _Mapping:
    """value as a _Mapping (null counts as empty); InventoryError if it is something else."""
    if value is None:
        return _Mapping(file)
    if not isinstance(value, _Mapping):
        prefix = f"{label}: " if label else ""
        raise InventoryError(file, line, f"{prefix}expected a mapping, got {describe(value)}",
                             fix=fix)
    return value


def _check_keys(mapping: _Mapping, allowed: tuple[str, ...]) -> None:
    """InventoryError for the first key of mapping that is not in allowed."""
    for key in mapping:
        if key not in allowed:
            raise _unknown_key(mapping.file, mapping.lines[key], key, list(allowed))


def _unknown_key(file: Path, line: int, key: Any, allowed: list[str]) -> InventoryError:
    """The error for a key that is not allowed here, with a did-you-mean suggestion."""
    return InventoryError(file, line, f"unknown key '{key}'{_did_you_mean(str(key), allowed)}",
                          fix="allowed keys: " + ", ".join(allowed))


def _check_name(name: Any, file: Path, line: int, kind: str) -> None:
    """InventoryError unless name is a usable host or group name."""
    if not (isinstance(name, str) and _NAME.fullmatch(name)) or name == "all":
        raise InventoryError(file, line, f"invalid {kind} name '{name}'",
                             fix="use letters, digits, '.', '_' and '-', e.g. spark-01; "
                             "'all' is taken")


def _did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _group_level(group_count: int) -> str:
    """The level of group vars: rack vars are allowed only when one group holds every node."""
    return "group" if group_count <= 1 else "subgroup"


def _normalized(address: str) -> str:
    """An address in one spelling, so that equal addresses compare equal."""
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address.lower()


def _rack_vars(settings: _Settings) -> RackVars:
    """The RackVars of merged settings; connection and host keys are left out."""
    return RackVars(**{key: setting.value for key, setting in settings.items()
                       if SPECS[key].scope in (RACK, NODE)})


def _resolve(directory: Path, path: str) -> Path:
    """path with ~ expanded; a relative path is taken relative to directory."""
    expanded = Path(path).expanduser()
    return expanded if expanded.is_absolute() else directory / expanded
