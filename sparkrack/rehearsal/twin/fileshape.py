"""A capture file's shape, checked before anything reads it: each node a mapping with a
node name, an integer rank and its fields of the kinds facts.capture writes, each RDMA
function and netdev too; a mistake is one line naming file:line and the node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkrack.core.errors import InventoryError
from sparkrack.inventory import YamlMapping
from sparkrack.inventory.values import MAX_NODE_NAME, is_node_name
from sparkrack.rehearsal.twin.trust import shown

FIX = "give the file facts.capture wrote, or capture the rack again"
Kind = tuple[str, Callable[[Any], bool]]
TEXT: Kind = ("text", lambda v: isinstance(v, str))
NUMBER: Kind = ("an integer", lambda v: v is None or isinstance(v, int) and not isinstance(v, bool))
FLAG: Kind = ("true or false", lambda v: isinstance(v, bool))
MAPPING: Kind = ("a mapping", lambda v: isinstance(v, dict))
TEXTS: Kind = ("a list of text", lambda v: isinstance(v, list) and all(
    isinstance(item, str) for item in v))
TEXT_MAP: Kind = ("a mapping of text", lambda v: isinstance(v, dict) and all(
    isinstance(item, str) for item in v.values()))
NODE = {"rank": NUMBER, "reachable": FLAG, "error": TEXT, "kernel": TEXT, "os": TEXT,
        "gpu": TEXT, "driver": TEXT, "cuda": TEXT, "memory_kib": NUMBER, "docker": TEXT,
        "clock_cap_unit": TEXT_MAP, "functions": MAPPING, "cabled": TEXTS}
FUNCTION = {"state": TEXT, "rate": TEXT, "netdevs": MAPPING, "gids": TEXTS}
NETDEV = {"mtu": NUMBER, "state": TEXT}


def check_capture(data: YamlMapping) -> None:
    """InventoryError (file:line) for the first node, function or netdev of data that is
    not what facts.capture writes, or a rack section that is not a mapping of vars."""
    _fields(data, {"captured": TEXT}, "")
    rack = data["rack"]
    if "node_vars" in rack and not isinstance(rack["node_vars"], dict):
        _refuse(rack, "node_vars", "rack: node_vars is not a mapping")
    for index, node in enumerate(data["nodes"]):
        if not isinstance(node, YamlMapping):
            _refuse(data, "nodes", f"nodes[{index}]: not a mapping")
        name = node.get("name")
        if not is_node_name(name):
            _refuse(node, "name", f"nodes[{index}]: name {shown(name)} is not a node name "
                    f"(at most {MAX_NODE_NAME} letters, digits, '.', '_' and '-')")
        where = f"nodes[{index}] ({name}): "
        if node.get("rank") is None:
            _refuse(node, "name", f"{where}no rank")
        _fields(node, NODE, where)
        for hca, function in (node.get("functions") or {}).items():
            if not isinstance(function, YamlMapping):
                _refuse(node["functions"], hca, f"{where}functions.{hca} is not a mapping")
            _fields(function, FUNCTION, f"{where}functions.{hca}.")
            for dev, netdev in (function.get("netdevs") or {}).items():
                if not isinstance(netdev, YamlMapping):
                    _refuse(function["netdevs"], dev,
                            f"{where}functions.{hca}.netdevs.{dev} is not a mapping")
                _fields(netdev, NETDEV, f"{where}functions.{hca}.netdevs.{dev}.")


def _fields(mapping: YamlMapping, kinds: dict[str, Kind], where: str) -> None:
    for key, (what, fits) in kinds.items():
        if key in mapping and not fits(mapping[key]):
            _refuse(mapping, key, f"{where}{key} is not {what}")


def _refuse(mapping: YamlMapping, key: Any, message: str) -> None:
    raise InventoryError(mapping.file, mapping.lines.get(key), message, fix=FIX)
