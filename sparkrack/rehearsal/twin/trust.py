"""What a twin takes from a capture, which is input from elsewhere (a bug report, another
operator), before anything is written as root: node names (each one names a file), each
node's own vars (only those a capture holds), text for a comment (escaped), and the folder
the twin's inventory goes in (never through a symbolic link, never over an inventory that
is not a twin's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.facts.capture import NODE_VARS
from sparkrack.inventory.values import MAX_NODE_NAME, is_node_name

MARK = "# The twin of rack "  # how the twin's own hosts.yml starts
FOLDER_FIX = "remove it, or give --twin-inventory a folder of its own"


def node_names(capture: dict[str, Any]) -> list[str]:
    """The capture's node names in file order; UsageError for one that is no node name (a
    path, '..', empty) or is there twice."""
    names: list[str] = []
    for index, node in enumerate(capture["nodes"]):
        name = node.get("name") if isinstance(node, dict) else None
        if not is_node_name(name):
            raise UsageError(f"nodes[{index}].name: {shown(name)} is not a node name",
                             fix=f"at most {MAX_NODE_NAME} letters, digits, '.', '_' and '-', "
                             "starting with a letter or digit, e.g. spark-01")
        if name in names:
            raise UsageError(f"nodes[{index}].name: {name} is named twice",
                             fix="capture the rack again")
        names.append(name)
    return names


def node_vars(capture: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """rack.node_vars: {node of the capture: {var of NODE_VARS: value}}; UsageError naming a
    key that is no node of the capture, a var a capture does not hold per node."""
    own = capture["rack"].get("node_vars") or {}
    if not isinstance(own, dict):
        raise UsageError("rack.node_vars: not a mapping of nodes", fix="capture the rack again")
    for name, values in own.items():
        if name not in names:
            raise UsageError(f"rack.node_vars: {shown(name)} is not a node of the capture "
                             f"({', '.join(names)})", fix="give each node's own vars under "
                             "its name, or capture the rack again")
        if not isinstance(values, dict):
            raise UsageError(f"rack.node_vars.{name}: not a mapping of vars",
                             fix="capture the rack again")
        for key in values:
            if key not in NODE_VARS:
                raise UsageError(f"rack.node_vars.{name}: {key!r} is not a var a capture "
                                 "holds per node", fix=f"those are {', '.join(NODE_VARS)}")
    return {name: dict(values) for name, values in own.items()}


def shown(value: Any) -> str:
    """value as a message shows it: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def comment(value: Any) -> str:
    """value as text for one comment line: line breaks and other control or non-ASCII
    characters escaped (\\n, \\u2028), so it cannot end the comment."""
    return json.dumps(str(value))[1:-1]


def check_folder(out: Path, names: list[str]) -> None:
    """UsageError unless out may hold the twin's inventory: absent, empty, or a twin's (its
    hosts.yml starts with MARK), and nothing the twin writes or removes there a link."""
    paths = [out, out / "hosts.yml", out / "group_vars", out / "group_vars" / "all.yml",
             out / "host_vars", *(out / "host_vars" / f"{name}.yml" for name in names)]
    if (out / "host_vars").is_dir() and not (out / "host_vars").is_symlink():
        paths += sorted((out / "host_vars").glob("*.yml"))
    for path in paths:
        if path.is_symlink():
            raise UsageError(f"{path}: a symbolic link, which the twin's inventory is never "
                             "written through", fix=FOLDER_FIX)
    if out.is_dir() and any(out.iterdir()) and not _is_twin(out / "hosts.yml"):
        raise UsageError(f"{out}: not a twin's inventory (no hosts.yml written by "
                         "`rehearsal.up --twin`), and the twin would replace what it holds",
                         fix="give --twin-inventory a folder of its own, e.g. inventory/twin")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a folder", fix=FOLDER_FIX)


def _is_twin(hosts: Path) -> bool:
    try:
        with open(hosts, "rb") as handle:
            return handle.read(len(MARK)) == MARK.encode()
    except OSError:
        return False
