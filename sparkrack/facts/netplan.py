"""Which network daemon renders a node's fabric netdevs: netplan's files as the node holds
them (NETPLAN: gather.py's `netplan_section`, `parse_netplan`), netplan's renderer of each
netdev (global or per device, later files override), the one role fabric's drop-in should
leave it with, and whether that daemon runs (its unit). Pure: the plan asks `renderer_for` and `problem`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from sparkrack.facts.queries import Fact
from sparkrack.facts.systemd import UnitFacts, unit_query
from sparkrack.remote.gather import netplan_section

NETWORKD = "networkd"
NETWORK_MANAGER = "NetworkManager"
DAEMONS = {NETWORKD: "systemd-networkd.service", NETWORK_MANAGER: "NetworkManager.service"}
DAEMON_QUERIES = tuple(unit_query(unit) for unit in DAEMONS.values())
PACKAGES = {NETWORKD: "systemd", NETWORK_MANAGER: "network-manager"}
DEFAULT = "netplan's default"  # the source of a renderer no file names


@dataclass(frozen=True)
class NetplanFile:
    """One YAML file netplan reads (the one of its name that shadows the others)."""

    path: str
    text: str | None  # None: unreadable


@dataclass(frozen=True)
class Renderer:
    """The daemon netplan hands a netdev to, and the file that says so."""

    name: str
    source: str = DEFAULT


def parse_netplan(lines: Iterable[str]) -> tuple[NetplanFile, ...]:
    """One `netplan_section`'s lines: `file PATH` then `content BASE64` (or nothing: unreadable)."""
    files: list[NetplanFile] = []
    for line in lines:
        key, _, value = line.partition(" ")
        if key == "file":
            files.append(NetplanFile(value, None))
        elif key == "content" and files and files[-1].text is None:
            try:
                text = base64.b64decode(value, validate=True).decode(errors="replace")
            except (binascii.Error, ValueError):
                continue
            files[-1] = NetplanFile(files[-1].path, text)
    return tuple(files)


NETPLAN = Fact(netplan_section, parse_netplan).query()


def renderers(files: Sequence[NetplanFile]) -> tuple[Renderer, dict[str, Renderer]]:
    """(the global renderer, {netdev: its own}) as netplan 0.106 merges the files, in
    order: the last global `renderer` wins; a device's own `renderer`, or the one its
    `ethernets:` block set above it in the same file, sticks to it across later files."""
    glob, own = Renderer(NETWORKD), {}
    for item in files:
        network = _network(item)
        if "renderer" in network:
            glob = Renderer(str(network["renderer"]), item.path)
        block = network.get("ethernets")
        if not isinstance(block, Mapping):
            continue
        typed = None
        for key, value in block.items():
            if key == "renderer":
                typed = Renderer(str(value), item.path)
            elif isinstance(value, Mapping) and "renderer" in value:
                own[str(key)] = Renderer(str(value["renderer"]), item.path)
            elif typed is not None:
                own[str(key)] = typed
    return glob, own


def renderer_of(files: Sequence[NetplanFile], netdev: str) -> Renderer:
    """The renderer netplan gives netdev."""
    glob, own = renderers(files)
    return own.get(netdev, glob)


def runs(units: Mapping[str, UnitFacts], renderer: str) -> bool:
    """Whether the renderer's daemon is active and starts at boot."""
    unit = units.get(DAEMONS.get(renderer, ""), UnitFacts())
    return unit.active == "active" and unit.is_enabled


def renderer_for(files: Sequence[NetplanFile], units: Mapping[str, UnitFacts], netdev: str,
                 ours: str = "") -> Renderer:
    """The renderer the drop-in ours should leave netdev with: the one another file names
    (global or its own); else the one ours names if that daemon runs (the take-over moved
    NVIDIA's file aside); else NetworkManager when it is the only daemon that runs; else
    netplan's default, networkd."""
    glob, own = renderers([f for f in files if f.path != ours])
    named = own.get(netdev) or (glob if glob.source != DEFAULT else None)
    if named is not None:
        return named
    mine = renderer_of([f for f in files if f.path == ours], netdev)
    if mine.source != DEFAULT and runs(units, mine.name):
        return mine
    if [name for name in DAEMONS if runs(units, name)] == [NETWORK_MANAGER]:
        return Renderer(NETWORK_MANAGER, "the daemon this node runs")
    return Renderer(NETWORKD)


def problem(files: Sequence[NetplanFile] | None, units: Mapping[str, UnitFacts],
            netdevs: Sequence[str], ours: str = "") -> str:
    """Why netplan cannot bring these netdevs' config up and keep it across a reboot
    (a daemon it cannot drive, or one that is not running and enabled), with the fix; ''
    when nothing stands in the way."""
    if files is None:
        return ""  # not gathered
    broken = [f.path for f in files if f.text is None or _unparsable(f)]
    if broken:
        return (f"netplan cannot read {broken[0]}: fix its YAML (`netplan get` names the "
                f"line)")
    for netdev in netdevs:
        renderer = renderer_for(files, units, netdev, ours)
        unit = DAEMONS.get(renderer.name)
        where = f"{renderer.source} renders {netdev} with {renderer.name}"
        if unit is None:
            return (f"{where}, which netplan cannot drive here: set `renderer: networkd` or "
                    f"`renderer: NetworkManager` there")
        if runs(units, renderer.name):
            continue
        facts = units.get(unit, UnitFacts())
        state = "not installed" if facts.load == "not-found" else (
            f"{facts.load}, {facts.active}, {facts.enabled or 'not enabled'}")
        other = NETWORKD if renderer.name == NETWORK_MANAGER else NETWORK_MANAGER
        there = "a file under /etc/netplan" if renderer.source == DEFAULT else renderer.source
        fix = (f"install {PACKAGES[renderer.name]}" if facts.load == "not-found" else
               f"`systemctl unmask {unit} && systemctl enable --now {unit}`")
        return (f"{where}, whose {unit} is {state} (the addresses would not be there after "
                f"a reboot): {fix}, or set `renderer: {other}` in {there}")
    return ""


def _network(item: NetplanFile) -> Mapping:
    try:
        data = yaml.safe_load(item.text or "")
    except yaml.YAMLError:
        return {}
    network = data.get("network") if isinstance(data, Mapping) else None
    return network if isinstance(network, Mapping) else {}


def _unparsable(item: NetplanFile) -> bool:
    try:
        yaml.safe_load(item.text or "")
    except yaml.YAMLError:
        return True
    return False
