"""The compile cache folders on the nodes (engines/compilecaches.py names them): the key of a
start, each rank's folder made before its container, and the housekeeping of `invoke
caches`.

A start's key is the image ID the image gate found on every node and each node's GPU
compute capability from the gates' facts (`cache_key`); `plan` asks for the same
(`probe_key`). `make_folders` (start.prepare, while the burn runs) makes each folder the
ranks will mount, root's and 0700, with its key file, and says whether the start finds
compiled kernels there. Housekeeping (`kept`, `remove_folders`) never removes a folder a
running container mounts, nor one of the head's current or last-good deployment's image
(any arch): a roll back to the last good lane and a restart stay warm.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack.deployments import record
from sparkrack.deployments.ranks import parallel
from sparkrack.engines import CacheKey, LaunchSpec
from sparkrack.engines.compilecaches import (
    CACHE_MOUNT,
    CACHE_ROOT,
    image_prefix,
    parse_folder_name,
)
from sparkrack.facts import node as node_facts
from sparkrack.facts.node import NodeFacts
from sparkrack.facts.queries import answer, argv
from sparkrack.fleet import Fleet
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Inventory, Node
from sparkrack.remote import script


def cache_key(image_id: str, facts: Mapping[str, NodeFacts]) -> CacheKey:
    """The key of a start from its gates: the image's ID, each node's compute capability."""
    return CacheKey(image_id, {name: f.gpu.compute_cap for name, f in facts.items()})


def probe_key(fleet: Fleet, image: str) -> CacheKey:
    """The key `up` would use now (for plan): the image's ID on the head and each node's
    compute capability, one round trip; what could not be read stays unknown."""
    queries = [node_facts.NODE]
    caps = {r.node: node_facts.gpu_of(answer(r.stdout, queries)).compute_cap
            for r in fleet.run(argv(queries), timeout=20) if r.ok}
    try:
        info = fleet.docker(fleet.inventory.head.name).image_info(image)
    except Exception:  # the head did not answer: the folder shows the image unknown
        info = None
    return CacheKey(info[0] if info else "", caps)


def cache_gate_lines(specs: Sequence[LaunchSpec], facts: Mapping[str, NodeFacts]
                     ) -> tuple[list[str], str]:
    """(problems: nodes whose ranks start without their node's caches, what the ranks
    mount) of a start's specs."""
    folders = {s.node: _folder(s) for s in specs}
    problems = [f"{node}: GPU arch unknown ({_gpu_error(facts.get(node))}): its rank starts "
                "without the node's compile caches" for node, f in folders.items() if f is None]
    by_folder: dict[str, list[str]] = {}
    for node, folder in folders.items():
        if folder is not None:
            by_folder.setdefault(folder, []).append(node)
    said = "; ".join(f"{folder} on {_nodes(nodes, len(specs))}"
                     for folder, nodes in by_folder.items())
    return problems, said or "none"


def make_folders(fleet: Fleet, specs: Sequence[LaunchSpec]) -> list[str]:
    """Make each rank's cache folder on its node (with its key file); one line saying
    where this start finds compiled kernels and where it compiles. Raises RuntimeError
    naming a node where the folder could not be made."""
    jobs = {s.node: (s, folder) for s in specs if (folder := _folder(s)) is not None}
    if not jobs:
        return []
    commands = {node: _node_argv("make", CACHE_ROOT, folder.rsplit("/", 1)[1],
                                 json.dumps(_key_record(spec, folder), sort_keys=True))
                for node, (spec, folder) in jobs.items()}
    results = fleet.run(commands, timeout=30)
    failed = [f"{r.node}: {r.error or r.stderr.strip()[:200]}" for r in results if not r.ok]
    if failed:
        raise RuntimeError("could not make the compile cache folder on " + "; ".join(failed))
    states = {r.node: last_json_object(r.stdout) for r in results}
    cold = sorted(n for n, s in states.items() if s.get("empty"))
    warm = sorted(n for n in states if n not in cold)
    size = max((int(s.get("bytes", 0)) for s in states.values()), default=0)
    lines = []
    if warm:
        lines.append(f"compile caches: kept from an earlier start on {_nodes(warm, len(specs))}"
                     f" (up to {size / 2**20:.1f} MiB a node): what was compiled for this "
                     "image is not compiled again")
    if cold:
        lines.append(f"compile caches: empty on {_nodes(cold, len(specs))}: this start "
                     "compiles, the next one of this image will not")
    return lines


@dataclass
class Folder:
    """One cache folder as the nodes hold it."""

    name: str
    engine: str = "?"
    image_id: str = ""  # the first hex digits of the image's ID (engines.compilecaches.IMAGE_HEX)
    arch: str = "?"
    nodes: dict[str, int] = field(default_factory=dict)  # node -> bytes there
    files: int = 0
    newest: float = 0.0
    kept: list[str] = field(default_factory=list)  # why it must stay (nothing: removable)

    def as_dict(self) -> dict:
        return {"name": self.name, "path": f"{CACHE_ROOT}/{self.name}", "engine": self.engine,
                "image_id": self.image_id, "arch": self.arch, "nodes": self.nodes,
                "files": self.files, "newest": self.newest, "kept": self.kept}


def list_folders(fleet: Fleet, nodes: Sequence[Node]) -> tuple[list[Folder], dict[str, str]]:
    """(every cache folder on nodes, {node: error} for those that did not answer)."""
    results = fleet.run({n.name: _node_argv("list", CACHE_ROOT) for n in nodes}, timeout=60)
    folders: dict[str, Folder] = {}
    errors = {}
    for result in results:
        try:
            found = json.loads(result.stdout) if result.ok else None
        except ValueError:
            found = None
        if not isinstance(found, list):
            errors[result.node] = result.error or "no answer from the cache lister"
            continue
        for entry in found:
            parsed = parse_folder_name(entry["name"]) or ("?", "", "?")
            key = entry.get("key") or {}
            folder = folders.setdefault(entry["name"], Folder(
                entry["name"], key.get("engine", parsed[0]),
                key.get("image_id_prefix", parsed[1]), parsed[2]))
            folder.nodes[result.node] = int(entry["bytes"])
            folder.files = max(folder.files, int(entry["files"]))
            folder.newest = max(folder.newest, float(entry["mtime"]))
    return sorted(folders.values(), key=lambda f: f.name), errors


def kept(fleet: Fleet, inventory: Inventory, folders: Sequence[Folder]) -> None:
    """Fill each folder's `kept`: the running containers that mount it, the head's current
    and last-good deployments whose engine and image it is for."""
    records = record.read(fleet, inventory)
    lanes = {kind: d for kind in ("current", "last-good") if (d := records.get(kind))}
    mounted = _mounted(fleet)
    for folder in folders:
        path = f"{CACHE_ROOT}/{folder.name}"
        folder.kept = [f"mounted by {', '.join(sorted(mounted[path]))}"] if path in mounted else []
        for kind, deployment in lanes.items():
            if deployment.engine == folder.engine and deployment.image_id and \
                    image_prefix(deployment.image_id) == image_prefix(folder.image_id):
                folder.kept.append(f"the {kind} deployment's image ({deployment.describe()})")


def remove_folders(fleet: Fleet, folders: Sequence[Folder], *, check: bool
                   ) -> dict[str, dict[str, dict]]:
    """Remove each folder (whole) from every node holding it; {node: {name: {bytes,
    error}}}. The caller has judged `kept`."""
    names: dict[str, list[str]] = {}
    for folder in folders:
        for node in folder.nodes:
            names.setdefault(node, []).append(folder.name)
    if not names:
        return {}
    results = fleet.run({node: _node_argv("remove", CACHE_ROOT, "1" if check else "0", *each)
                         for node, each in names.items()}, timeout=600)
    return {r.node: last_json_object(r.stdout) or {n: {"bytes": 0, "error": r.error or
                                                      "no answer"} for n in names[r.node]}
            for r in results}


def _mounted(fleet: Fleet) -> dict[str, set[str]]:
    """{cache folder: 'container@node' of the running containers binding it}."""
    def one(node: Node) -> list[tuple[str, str]]:
        return [(source, f"{c.name}@{node.name}")
                for c in fleet.docker(node.name).containers() if c.alive
                for source in c.mounts if source.startswith(CACHE_ROOT + "/")]

    found: dict[str, set[str]] = {}
    for pairs in parallel(fleet.nodes, one):
        for source, where in pairs:
            found.setdefault(source.rstrip("/"), set()).add(where)
    return found


def _gpu_error(facts: NodeFacts | None) -> str:
    return (facts.gpu.error if facts is not None else None) or "no compute_cap"


def _folder(spec: LaunchSpec) -> str | None:
    """The node folder spec's rank mounts for its caches, if any."""
    return next((m.source for m in spec.docker.mounts if m.target == CACHE_MOUNT), None)


def _key_record(spec: LaunchSpec, folder: str) -> dict:
    parsed = parse_folder_name(folder.rsplit("/", 1)[1]) or ("?", "", "?")
    return {"engine": spec.engine, "image": spec.image, "image_id_prefix": parsed[1],
            "arch": parsed[2], "made": time.time(), "by": spec.deployment_id}


def _node_argv(*args: str) -> list[str]:
    return ["python3", "-I", "-S", "-c", script("caches"), *args]


def _nodes(names: Sequence[str], total: int) -> str:
    return f"all {total} nodes" if len(names) == total and total > 1 else ", ".join(names)
