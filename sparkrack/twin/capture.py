"""`invoke facts.capture`: one read-only round trip per node of the inventory, written as
one versioned YAML file (sparkrack/facts/capture.py says what is in it and what is not).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from ..atomic import write_atomically
from ..errors import UsageError
from ..facts import capture as shape
from ..facts.queries import answer
from ..facts.queries import argv as gather_argv
from ..inventory import Inventory

TIMEOUT_S = 60


def capture(inventory: Inventory, fleet=None) -> dict[str, Any]:
    """The rack's capture: every node of inventory asked once (a dead node recorded as
    unreachable, never a failure of the capture)."""
    from ..fleet import Fleet

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
            nodes.append(shape.unreachable(node.name, node.rank,
                                           result.error or result.status))
    return {"sparkrack_capture": shape.VERSION,
            "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rack": shape.rack_record(inventory), "nodes": nodes}


def dump(document: dict[str, Any]) -> str:
    """The capture as YAML, keys in the order they were made."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def write(document: dict[str, Any], path: Path) -> None:
    """Write the capture to path atomically."""
    write_atomically(path, dump(document))


def read(path: Path) -> dict[str, Any]:
    """A capture file; UsageError naming the file and what is wrong with it."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror}", fix="give the file facts.capture wrote")
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not YAML ({str(error).splitlines()[0]})",
                         fix="give the file facts.capture wrote") from None
    if not isinstance(data, dict) or "sparkrack_capture" not in data:
        raise UsageError(f"{path}: not a sparkrack capture (no sparkrack_capture key)",
                         fix="give the file facts.capture wrote")
    if data["sparkrack_capture"] != shape.VERSION:
        raise UsageError(f"{path}: capture version {data['sparkrack_capture']}, this sparkrack "
                         f"reads {shape.VERSION}", fix="capture the rack again")
    if not isinstance(data.get("nodes"), list) or not isinstance(data.get("rack"), dict):
        raise UsageError(f"{path}: no nodes or rack section", fix="capture the rack again")
    return data
