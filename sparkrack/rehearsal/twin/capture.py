"""`invoke facts.capture`: one read-only round trip per node of the inventory, written as
one versioned YAML file (sparkrack/facts/capture.py says what is in it and what is not).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from sparkrack.core.atomic import write_atomically
from sparkrack.core.errors import UsageError
from sparkrack.facts import capture as shape
from sparkrack.facts.queries import answer
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.inventory import Inventory, read_yaml
from sparkrack.inventory.schema import plain
from sparkrack.rehearsal.twin.fileshape import FIX, check_capture

TIMEOUT_S = 60


def capture(inventory: Inventory, fleet=None) -> dict[str, Any]:
    """The rack's capture: every node of inventory asked once (a dead node recorded as
    unreachable, never a failure of the capture)."""
    from sparkrack.fleet import Fleet

    queries = shape.queries()
    own = fleet is None
    fleet = fleet or Fleet(inventory)
    try:
        results = fleet.run({n.name: gather_argv(queries) for n in inventory.nodes},
                            timeout=TIMEOUT_S)
    finally:
        if own:
            fleet.close()
    nodes = []
    for node in inventory.nodes:
        result = results[node.name]
        if result.ok:
            nodes.append(shape.node_capture(node.name, node.rank,
                                            answer(result.stdout, queries)))
        else:
            nodes.append(shape.unreachable(node.name, node.rank, failure(result)))
    return {"sparkrack_capture": shape.VERSION,
            "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rack": shape.rack_record(inventory), "nodes": nodes}


def failure(result) -> str:
    """Why a node gave no answer, as a category naming nothing of it: the fleet's cause
    (unreachable, authentication refused, host key unknown or changed), else `query failed`
    (it answered, but the query did not end well)."""
    if result.status == "unreachable":
        return result.cause or "unreachable"
    return "query failed"


def dump(document: dict[str, Any]) -> str:
    """The capture as YAML, keys in the order they were made."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def write(document: dict[str, Any], path: Path) -> None:
    """Write the capture to path atomically."""
    write_atomically(path, dump(document))


def read(path: Path) -> dict[str, Any]:
    """A capture file, read with the inventory's bounds (size, aliases, duplicate keys) and
    its shape checked (fileshape.py); UsageError naming the file, the line and what is wrong."""
    data = read_yaml(path)
    if not isinstance(data, dict) or "sparkrack_capture" not in data:
        raise UsageError(f"{path}: not a sparkrack capture (no sparkrack_capture key)", fix=FIX)
    if data["sparkrack_capture"] != shape.VERSION:
        raise UsageError(f"{path}: capture version {data['sparkrack_capture']}, this sparkrack "
                         f"reads {shape.VERSION}", fix="capture the rack again")
    if not isinstance(data.get("nodes"), list) or not isinstance(data.get("rack"), dict):
        raise UsageError(f"{path}: no nodes or rack section", fix="capture the rack again")
    check_capture(data)
    return plain(data)
