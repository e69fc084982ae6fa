"""The staged models on the nodes: verify against the manifest, list, remove; the `up` gate.

Each node is asked once (sparkrack/remote/stager.py). A manifest holds hashes, not sizes:
the sizes a file should have are the rack's, the size most nodes holding the same
manifest report for it (so a file truncated on one node stands out by size alone);
`full` hashes every file against its manifest line instead.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkrack.fleet import Fleet
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Node
from sparkrack.transfer.chain import DEFAULT_PYTHON
from sparkrack.transfer.manifest import MANIFEST_NAME, STAGE_CACHE, size_text
from sparkrack.transfer.weights import stager


def read_manifests(fleet: Fleet, nodes: Sequence[Node], model_path: str) -> dict[str, str | None]:
    """{node: its manifest text, or None} (one small read per node)."""
    path = f"{model_path.rstrip('/')}/{MANIFEST_NAME}"
    results = fleet.run({n.name: ["cat", path] for n in nodes}, timeout=30)
    return {r.node: r.stdout if r.ok and r.stdout.strip() else None for r in results}


@dataclass
class NodeModel:
    """One node's copy of a model directory, judged against the rack's."""

    node: str
    status: str = "ok"  # ok | incomplete | no manifest | differs | busy | unreachable
    digest: str | None = None
    files: int = 0
    bytes: int = 0
    partials: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"node": self.node, "status": self.status, "digest": self.digest,
                "files": self.files, "bytes": self.bytes, "partials": self.partials,
                "problems": self.problems}


def verify_model(fleet: Fleet, nodes: Sequence[Node], model_path: str, *, full: bool = False,
                 python: str = DEFAULT_PYTHON) -> tuple[str | None, list[NodeModel]]:
    """(the rack's manifest digest, one NodeModel per node in rank order)."""
    root = model_path.rstrip("/")
    results = fleet.run({n.name: stager(python, "verify", root, "1" if full else "0")
                         for n in nodes}, timeout=24 * 3600 if full else 60)
    seen: dict[str, dict] = {}
    rows = []
    for n in nodes:
        result, row = results[n.name], NodeModel(n.name)
        rows.append(row)
        data = last_json_object(result.stdout)
        if result.status == "unreachable" or not result.ok or "sizes" not in data:
            row.status = "unreachable" if result.status == "unreachable" else "failed"
            row.problems.append(result.error or "no answer from the stager")
            continue
        seen[n.name] = data
        row.digest, row.partials = data["digest"], int(data.get("partials", 0))
    digests = Counter(d["digest"] for d in seen.values() if d["digest"])
    reference = digests.most_common(1)[0][0] if digests else None
    holders = [d for d in seen.values() if d["digest"] == reference]
    names = sorted({name for d in holders for name in d["sizes"]})
    sizes = {}
    for name in names:
        counted = Counter(d["sizes"][name] for d in holders if d["sizes"].get(name) is not None)
        if counted:
            sizes[name] = counted.most_common(1)[0][0]
    for row in rows:
        data = seen.get(row.node)
        if data is None:
            continue
        if data.get("busy"):
            row.status = "busy"
            row.problems.append(f"a transfer is writing into {root}")
        if not data["digest"]:
            row.status = "no manifest" if data.get("exists") else "missing"
            row.problems.append(f"no {MANIFEST_NAME}" + (
                f" ({row.partials} partial file(s): an interrupted copy)" if row.partials else
                "" if data.get("exists") else f" ({root} does not exist)"))
            continue
        if data["digest"] != reference:
            row.status = "differs"
            row.problems.append(f"manifest {data['digest'][:12]} differs from the rack's "
                                f"{reference[:12]}")
        for name, size in data["sizes"].items():
            if size is None:
                row.problems.append(f"{name} missing")
            elif data["digest"] == reference and sizes.get(name) not in (None, size):
                row.problems.append(f"{name}: {size} bytes, the rack's {sizes[name]}")
            else:
                row.files += 1
                row.bytes += size
        row.problems += [f"{name}: {why}" for name, why in data.get("bad", {}).items()]
        if row.problems and row.status == "ok":
            row.status = "incomplete"
    return reference, rows


def gate_problems(fleet: Fleet, nodes: Sequence[Node], model_path: str) -> tuple[str, list[str]]:
    """(the digest every node holds, or ''; one line per node that would refuse a start)."""
    reference, rows = verify_model(fleet, nodes, model_path)
    fix = f"run `invoke weights.stage --model {model_path.rstrip('/')}`"
    problems = [f"{r.node}: {model_path.rstrip('/')}: {'; '.join(r.problems[:3])}"
                + (f" (+{len(r.problems) - 3} more)" if len(r.problems) > 3 else "")
                for r in rows if r.problems]
    if problems:
        return "", [f"{p} ({fix})" for p in problems]
    return reference or "", []


@dataclass
class StagedModel:
    """A model directory found on the nodes (one row of `weights.list`)."""

    path: str
    digests: dict[str, list[str]] = field(default_factory=dict)  # digest -> nodes
    partial_nodes: list[str] = field(default_factory=list)
    busy_nodes: list[str] = field(default_factory=list)
    bytes: int = 0
    files: int = 0

    def as_dict(self) -> dict:
        return {"path": self.path, "digests": self.digests, "partial_nodes": self.partial_nodes,
                "busy_nodes": self.busy_nodes, "bytes": self.bytes, "files": self.files}


def list_models(fleet: Fleet, nodes: Sequence[Node], parents: Sequence[str], *,
                python: str = DEFAULT_PYTHON) -> tuple[list[StagedModel], dict[str, str]]:
    """(the model directories under parents on any node, {node: error} of nodes that did
    not answer)."""
    results = fleet.run({n.name: stager(python, "list", *parents) for n in nodes}, timeout=60)
    found: dict[str, StagedModel] = {}
    errors = {}
    for n in nodes:
        result = results[n.name]
        try:
            entries = json.loads(result.stdout) if result.ok else None
        except ValueError:
            entries = None
        if entries is None:
            errors[n.name] = result.error or "no answer from the stager"
            continue
        for e in entries:
            model = found.setdefault(e["path"], StagedModel(e["path"]))
            if e["digest"]:
                model.digests.setdefault(e["digest"], []).append(n.name)
                model.bytes, model.files = max(model.bytes, e["bytes"]), max(model.files,
                                                                             e["files"])
            if e["partials"]:
                model.partial_nodes.append(n.name)
            if e["busy"]:
                model.busy_nodes.append(n.name)
    return sorted(found.values(), key=lambda m: m.path), errors


def remove_model(fleet: Fleet, nodes: Sequence[Node], model_path: str, *, check: bool,
                 python: str = DEFAULT_PYTHON) -> dict[str, dict]:
    """{node: what was (or with check, would be) removed, or its error}: the manifest's
    files, partial files and the manifest, and their hash cache entries; nothing the
    manifest does not list. The node checks the names itself (its manifest may not be the
    rack's): one leading outside model_path is that node's error, and nothing is removed
    there."""
    results = fleet.run({n.name: stager(python, "remove", model_path.rstrip("/"),
                                        "1" if check else "0", STAGE_CACHE) for n in nodes},
                        timeout=600)
    out = {}
    for n in nodes:
        result = results[n.name]
        data = last_json_object(result.stdout)
        if not data:
            data = {"removed": [], "bytes": 0, "left": [], "error": result.error or "no answer"}
        data["unreachable"] = result.status == "unreachable"
        out[n.name] = data
    return out


def describe_removal(data: dict) -> str:
    """One line for a node's removal."""
    if data.get("error"):
        return data["error"]
    left = f"; left in place (not listed): {', '.join(data['left'][:3])}" if data["left"] else ""
    return f"{len(data['removed'])} file(s), {size_text(data['bytes'])}{left}"
