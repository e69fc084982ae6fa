"""Read and check an inventory directory (hosts.yml, group_vars/, host_vars/) into an
`Inventory`: every mistake an InventoryError naming file:line and the fix."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrack.core.errors import InventoryError, allowed_fix, did_you_mean
from sparkrack.inventory.model import Inventory, Node, resolve_path
from sparkrack.inventory.pdu import outlets_problem
from sparkrack.inventory.ranges import POWER_KEYS, power_problem
from sparkrack.inventory.schema import (
    CONNECTION,
    HOST,
    NODE,
    RACK,
    SPECS,
    FrozenMapping,
    RackVars,
    describe,
)
from sparkrack.inventory.values import (
    MAX_NODE_NAME,
    fabric_address_problem,
    is_address,
    is_node_name,
)
from sparkrack.inventory.yamlfile import YamlMapping, read_yaml

INVENTORY_ENV = "SPARKRACK_INVENTORY"
DEFAULT_INVENTORY = Path("inventory", "rack")  # the real rack's, in a checkout of the repo

_WHERE_FIX = f"pass -i/--inventory DIR or set {INVENTORY_ENV} to a directory holding hosts.yml"
_SHAPE_FIX = "shape: all: {children: {sparks: {hosts: {spark-01: {ansible_host: ADDR, rank: 0}}}}}"
_VARS_FIX = "write one key: value per line"
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


# --- Reading and checking an inventory -------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    """One var's checked value and where it was set."""

    value: Any
    file: Path
    line: int
    source: Any = None  # the value as read (a YamlMapping knows the lines of its keys)


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
        self.warnings: list[str] = []  # file:line: a legal but unusual value (ranges.py)

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
        _check_power(rack)
        self._check_unique(drafts, "ansible_host")
        self._check_unique(drafts, "roce_addr")
        self._check_pdu(rack, [d.host.name for d in members], sorted(spares))
        for draft in drafts:
            _check_fabric(draft)
        nodes = sorted((self._node(draft) for draft in members), key=lambda node: node.rank)
        return Inventory(
            path=self.dir, nodes=tuple(nodes), vars=_rack_vars(rack),
            groups=FrozenMapping({g.name: tuple(h.name for h in g.hosts if h.name not in spares)
                                  for g in groups}),
            spares=tuple(self._node(draft) for draft in spare_drafts),
            warnings=tuple(dict.fromkeys(self.warnings)))

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
        top = _mapping(read_yaml(file), file, None, "", _SHAPE_FIX)
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

    def _read_host(self, hosts: YamlMapping, name: Any, group: str,
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

    def _vars(self, owner: YamlMapping) -> YamlMapping | None:
        """The `vars` mapping of a hosts.yml entry, if it has one."""
        if "vars" not in owner:
            return None
        return _mapping(owner["vars"], self.hosts_file, owner.lines["vars"], "vars", _VARS_FIX)

    def _var_files(self, folder: str, kind: str, known: list[str]) -> dict[str, YamlMapping]:
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
                    f"hosts.yml{did_you_mean(entry.stem, known)}", fix=fix)
            found[entry.stem] = _mapping(read_yaml(entry), entry, None, "", _VARS_FIX)
        return found

    def _settings(self, mapping: YamlMapping | None, level: str) -> _Settings:
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
                settings[key] = _Setting(spec.check(value), mapping.file, line, value)
            except ValueError as error:
                raise InventoryError(mapping.file, getattr(error, "line", None) or line,
                                     str(error), fix=getattr(error, "fix", None)
                                     or spec.example()) from None
            warning = spec.warning(settings[key].value)
            if warning:
                self.warnings.append(f"{mapping.file}:{line}: {warning}")
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

    def _check_pdu(self, rack: _Settings, members: list[str], spares: list[str]) -> None:
        """The PDU's outlets name hosts of hosts.yml, and every member has one."""
        setting = rack.get("pdu")
        problem = setting and outlets_problem(setting.value, setting.source, members, spares)
        if problem:
            line, message, fix = problem
            raise InventoryError(setting.file, line or setting.line, message, fix=fix)

    def _node(self, draft: _Draft) -> Node:
        """The Node for one validated host."""
        key_file = draft.value("ansible_ssh_private_key_file")
        return Node(
            name=draft.host.name, address=draft.addresses["ansible_host"].value,
            port=draft.value("ansible_port"),
            user=draft.value("ansible_user"),
            key_file=resolve_path(self.dir, key_file) if key_file else None,
            rank=-1 if draft.value("spare") else draft.value("rank"),
            roce_addr=draft.addresses["roce_addr"].value,
            vars=_rack_vars(draft.settings),
            roce_twin_addr=draft.value("roce_twin_addr"))

    def _where(self, setting: _Setting) -> str:
        """file:line of a setting, the file relative to the inventory directory."""
        return f"{setting.file.relative_to(self.dir)}:{setting.line}"


def _mapping(value: Any, file: Path, line: int | None, label: str, fix: str) -> YamlMapping:
    """value as a YamlMapping (null counts as empty); InventoryError if it is something else."""
    if value is None:
        return YamlMapping(file)
    if not isinstance(value, YamlMapping):
        prefix = f"{label}: " if label else ""
        raise InventoryError(file, line, f"{prefix}expected a mapping, got {describe(value)}",
                             fix=fix)
    return value


def _check_keys(mapping: YamlMapping, allowed: tuple[str, ...]) -> None:
    """InventoryError for the first key of mapping that is not in allowed."""
    for key in mapping:
        if key not in allowed:
            raise _unknown_key(mapping.file, mapping.lines[key], key, list(allowed))


def _unknown_key(file: Path, line: int, key: Any, allowed: list[str]) -> InventoryError:
    """The error for a key that is not allowed here, with a did-you-mean suggestion."""
    return InventoryError(file, line, f"unknown key '{key}'{did_you_mean(str(key), allowed)}",
                          fix=allowed_fix("allowed keys", allowed, "docs/inventory.md#values"))


def _check_name(name: Any, file: Path, line: int, kind: str) -> None:
    """InventoryError unless name is a usable host or group name."""
    if not is_node_name(name):
        shown = str(name) if len(str(name)) <= 40 else f"{str(name)[:37]}..."
        raise InventoryError(file, line, f"invalid {kind} name '{shown}'",
                             fix=f"use at most {MAX_NODE_NAME} letters, digits, '.', '_' and "
                             "'-', e.g. spark-01; 'all' is taken")


_FABRIC_FIX = {"roce_addr": "e.g. roce_addr: 198.51.100.11, or leave it out",
               "roce_twin_addr": "e.g. roce_twin_addr: 198.51.101.11, or leave it out"}


def _check_fabric(draft: _Draft) -> None:
    """InventoryError unless the node's fabric addresses are IPv4 addresses (roce_addr may
    also be its ansible_host: the management address, which no fabric netdev carries)."""
    for key, fix in _FABRIC_FIX.items():
        setting = draft.settings.get(key)
        if setting is None or (key == "roce_addr" and _normalized(setting.value) == _normalized(
                draft.addresses["ansible_host"].value)):
            continue
        problem = fabric_address_problem(setting.value)
        if problem:
            raise InventoryError(
                setting.file, setting.line, f"{draft.host.name}: {key} {setting.value} {problem}, "
                "but a fabric address is IPv4 (docs/inventory.md#values)", fix=fix)


def _check_power(rack: _Settings) -> None:
    """The power figures agree with each other (ranges.power_problem), at their line."""
    values = {key: rack[key].value if key in rack else SPECS[key].default for key in POWER_KEYS}
    found = power_problem(values)
    if found:
        key, message, fix = found
        where = rack.get(key) or next(rack[other] for other in POWER_KEYS if other in rack)
        raise InventoryError(where.file, where.line, message, fix=fix)


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
