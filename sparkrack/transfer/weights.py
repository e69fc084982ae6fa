"""A model directory onto nodes through the chain: the manifest made once at the source,
files present skipped, partial files resumed, every file verified, the manifest written
last (docs/weights.md#staging).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack import remote
from sparkrack.fleet import Fleet
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Node
from sparkrack.remote.relay import file_stream
from sparkrack.transfer.chain import (
    DEFAULT_PYTHON,
    Hop,
    LocalSource,
    NodeSource,
    Progress,
    relay_error,
    run_chain,
)
from sparkrack.transfer.manifest import (
    MANIFEST_NAME,
    STAGE_CACHE,
    ManifestError,
    digest,
    parse_manifest,
    size_text,
)


@dataclass(frozen=True)
class Source:
    """Where the model comes from: path on node, or on this machine (node None)."""

    path: str
    node: Node | None = None

    @property
    def label(self) -> str:
        return f"{self.node.name}:{self.path}" if self.node else f"this machine:{self.path}"


@dataclass
class NodeStage:
    """One target's staging."""

    node: str
    state: str = "planned"  # present | completed | copied | would copy | failed | unreachable
    needed: dict[str, int] = field(default_factory=dict)  # name -> offset it resumes from
    copied: list[str] = field(default_factory=list)
    resumed: dict[str, int] = field(default_factory=dict)
    received: int = 0  # stream bytes through this node
    hashed_bytes: int = 0  # read back here to check what it already had
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.state in ("present", "completed", "copied", "would copy")


@dataclass
class StageReport:
    """What staging found and did, per target node."""

    model_path: str
    source: str
    check: bool = False
    digest: str = ""
    files: int = 0
    total_bytes: int = 0
    manifest_made: bool = False  # hashed at the source in this run
    nodes: dict[str, NodeStage] = field(default_factory=dict)
    bytes_sent: int = 0  # bytes that left the source, over every chain
    chains: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # the source's, before any node

    @property
    def errors(self) -> list[str]:
        return [f"{n.node}: {n.error}" for n in self.nodes.values() if n.error] + self.problems

    @property
    def copied(self) -> list[str]:
        return sorted({name for n in self.nodes.values() for name in n.copied})

    @property
    def resumed(self) -> dict[str, int]:
        return {name: off for n in self.nodes.values() for name, off in n.resumed.items()}

    @property
    def verified(self) -> bool:
        """Every target holds every file right and the manifest."""
        return not self.errors and all(n.state in ("present", "completed", "copied")
                                       for n in self.nodes.values())

    def summary(self) -> str:
        if self.errors:
            return f"{len(self.errors)} problem(s): {self.errors[0]}"
        states = {}
        for n in self.nodes.values():
            states.setdefault(n.state, []).append(n.node)
        parts = ", ".join(f"{len(v)} {k}" for k, v in states.items())
        if self.check:
            need = sum(1 for n in self.nodes.values() if n.needed)
            return (f"{self.files} files ({size_text(self.total_bytes)}): {parts}; "
                    f"{need} node(s) would get files from {self.source}")
        return (f"{self.files} files ({size_text(self.total_bytes)}) verified against "
                f"{MANIFEST_NAME} on {len(self.nodes)} node(s): {parts}; "
                f"{size_text(self.bytes_sent)} sent from {self.source} in {self.seconds:.1f} s")

    def as_dict(self) -> dict:
        return {"model_path": self.model_path, "source": self.source, "check": self.check,
                "digest": self.digest, "files": self.files, "total_bytes": self.total_bytes,
                "manifest_made": self.manifest_made, "bytes_sent": self.bytes_sent,
                "chains": self.chains, "seconds": round(self.seconds, 3),
                "errors": self.errors, "verified": self.verified,
                "nodes": {name: {"state": n.state, "needed": n.needed, "copied": n.copied,
                                 "resumed": n.resumed, "received": n.received,
                                 "hashed_bytes": n.hashed_bytes, "error": n.error}
                          for name, n in self.nodes.items()}}


def stager(python: str, *args: str) -> list:
    """The argv of one stager question (sparkrack/remote/stager.py)."""
    return remote.argv(python, "stager", *args)


def stage(fleet: Fleet, source: Source, targets: Sequence[Node], model_path: str, *,
          manifest_text: str | None = None, python: str = DEFAULT_PYTHON,
          bwlimit: float | None = None, full_verify: bool = False, check: bool = False,
          attempts: int = 2, timeout: float = 24 * 3600.0,
          on_event: Callable[[str], None] = lambda line: None,
          on_progress: Progress = lambda node, done, total: None) -> StageReport:
    """Bring the model at source onto targets' model_path (see the module doc). check:
    plan only (the manifest is not written at the source either). Never raises for a
    node's failure: the report says what went wrong where."""
    started = time.monotonic()
    root = model_path.rstrip("/")
    report = StageReport(root, source.label, check)
    targets = [t for t in targets if source.node is None or t.name != source.node.name]
    report.nodes = {t.name: NodeStage(t.name) for t in targets}
    manifest, text, sizes = _source_manifest(fleet, source, manifest_text, python, check,
                                             report)
    if manifest is None:
        report.seconds = time.monotonic() - started
        return report
    report.digest, report.files, report.total_bytes = digest(text), len(manifest), sum(
        sizes.values())
    on_event(f"manifest {report.digest[:12]}: {report.files} files, "
             f"{size_text(report.total_bytes)}"
             + (" (made at the source)" if report.manifest_made else ""))
    files = [[name, manifest[name], sizes[name]] for name in sorted(manifest)]
    needy = _plan(fleet, targets, root, files, python, full_verify, check, report)
    complete = [t for t in targets if report.nodes[t.name].state == "planned"
                and not report.nodes[t.name].needed]
    if check:
        for t in targets:
            n = report.nodes[t.name]
            if n.state == "planned":
                n.state = "would copy" if n.needed else "present"
        report.seconds = time.monotonic() - started
        return report
    _write_manifests(fleet, complete, root, text, report, fresh=False)
    for _ in range(attempts):
        if not needy:
            break
        report.chains += 1
        _chain(fleet, source, needy, root, manifest, sizes, python, bwlimit, timeout, report,
               on_event, on_progress)
        again = _plan(fleet, [t for t in needy if report.nodes[t.name].state != "unreachable"],
                      root, files, python, False, False, report)
        done = [t for t in needy if report.nodes[t.name].state == "planned"
                and not report.nodes[t.name].needed]
        _write_manifests(fleet, done, root, text, report, fresh=True)
        needy = [t for t in again if report.nodes[t.name].state == "planned"]
    for t in needy:
        n = report.nodes[t.name]
        n.state = "failed"
        n.error = n.error or (f"{len(n.needed)} file(s) still wrong after the copy, e.g. "
                              f"{next(iter(n.needed))}")
    report.seconds = time.monotonic() - started
    return report


def _source_manifest(fleet: Fleet, source: Source, given: str | None, python: str,
                     check: bool, report: StageReport
                     ) -> tuple[dict[str, str] | None, str, dict[str, int]]:
    """(manifest, its text, {name: size at the source}), or None and report.problems."""
    root = source.path.rstrip("/")
    if given is None:
        args = ["manifest", root, STAGE_CACHE if source.node else str(_local_cache()),
                "0" if check else "1"]
        code, data, why = _ask(fleet, source, python, args, b"")
        if code != 0 or "text" not in data:
            report.problems.append(f"{source.label}: cannot make the manifest: "
                                   f"{data.get('error') or why}")
            return None, "", {}
        text, sizes = data["text"], {k: int(v) for k, v in data["sizes"].items()}
        report.manifest_made = bool(data.get("made"))
    else:
        text = given
    try:
        manifest = parse_manifest(text)
    except ManifestError as error:
        report.problems.append(f"{MANIFEST_NAME} of {source.label}: {error}")
        return None, "", {}
    if given is not None:
        code, data, why = _ask(fleet, source, python, ["sizes", root],
                               json.dumps(sorted(manifest)).encode())
        if code != 0 or not data:
            report.problems.append(f"{source.label}: cannot list the model files: {why}")
            return None, "", {}
        missing = [n for n in sorted(manifest) if data.get(n) is None]
        if missing:
            report.problems.append(f"{source.label} lacks {len(missing)} manifest file(s) "
                                   f"(e.g. {missing[0]}): choose another source")
            return None, "", {}
        sizes = {k: int(v) for k, v in data.items()}
    return manifest, text, sizes


def _local_cache() -> Path:
    """This machine's hash cache of model files it was the source of."""
    from sparkrack.oplock.identity import state_dir

    return state_dir() / "stage-verified.json"


def _ask(fleet: Fleet, source: Source, python: str, args: list[str],
         stdin: bytes) -> tuple[int | None, dict, str]:
    """Run a stager question where the source is: (exit code, its JSON, why it failed)."""
    if source.node is None:
        done = subprocess.run([sys.executable, "-c", remote.script("stager"), *args],
                              input=stdin, capture_output=True, check=False)
        out = done.stdout.decode(errors="replace")
        return done.returncode, last_json_object(out), done.stderr.decode(
            errors="replace").strip()[-200:]
    result = fleet.run({source.node.name: stager(python, *args)}, stdin=stdin,
                       timeout=24 * 3600)[source.node.name]
    return result.exit_code, last_json_object(result.stdout), result.error or ""


def _plan(fleet: Fleet, targets: Sequence[Node], root: str, files: list, python: str,
          full: bool, readonly: bool, report: StageReport) -> list[Node]:
    """Ask each target what it has; fills report.nodes[..].needed; returns the targets
    that need something and can take it."""
    if not targets:
        return []
    results = fleet.run({t.name: stager(python, "check", root, STAGE_CACHE, "1" if full else "0",
                                        "0" if readonly else "1") for t in targets},
                        stdin=json.dumps(files).encode(), timeout=24 * 3600)
    needy = []
    for t in targets:
        result, n = results[t.name], report.nodes[t.name]
        data = last_json_object(result.stdout)
        if result.status == "unreachable":
            n.state, n.error = "unreachable", result.error
        elif data.get("busy"):
            n.state, n.error = "failed", (f"a transfer into {root} is still running (an "
                                          "interrupted run's relay finishing?): wait a minute "
                                          "and run again")
        elif not result.ok or "files" not in data:
            n.state, n.error = "failed", (f"cannot check the model files: "
                                          f"{result.error or result.stderr.strip()[-200:]}")
        else:
            n.hashed_bytes += int(data.get("hashed_bytes", 0))
            n.needed = {name: e["offset"] for name, e in data["files"].items()
                        if e["state"] != "ok"}
            if n.needed:
                needy.append(t)
    return needy


def _write_manifests(fleet: Fleet, nodes: Sequence[Node], root: str, text: str,
                     report: StageReport, *, fresh: bool) -> None:
    """The manifest onto nodes whose files are all right, last (skipped where it is)."""
    if not nodes:
        return
    have = fleet.run({n.name: ["cat", f"{root}/{MANIFEST_NAME}"] for n in nodes}, timeout=30)
    write = [n for n in nodes if not (have[n.name].ok and have[n.name].stdout == text)]
    for n in nodes:
        if n not in write:
            report.nodes[n.name].state = "copied" if fresh else "present"
            report.nodes[n.name].error = None
    if not write:
        return
    written = fleet.put({n.name: [(text.encode(), f"{root}/{MANIFEST_NAME}", 0o644)]
                         for n in write}, timeout=60)
    for n in write:
        stage_n = report.nodes[n.name]
        if written[n.name].ok:
            stage_n.state, stage_n.error = ("copied" if fresh else "completed"), None
        else:
            stage_n.state, stage_n.error = "failed", (f"cannot write the manifest: "
                                                      f"{written[n.name].error}")


def _chain(fleet: Fleet, source: Source, needy: Sequence[Node], root: str,
           manifest: Mapping[str, str], sizes: Mapping[str, int], python: str,
           bwlimit: float | None, timeout: float, report: StageReport,
           on_event: Callable[[str], None], on_progress: Progress) -> None:
    """One chain through needy (in rank order) carrying every file one of them needs."""
    offsets: dict[str, int] = {}
    for t in needy:
        for name, offset in report.nodes[t.name].needed.items():
            offsets[name] = min(offset, offsets.get(name, offset))
    plan = [[name, sizes[name], offsets[name]] for name in sorted(offsets)]
    stream_bytes = sum(sizes[name] - offset for name, _, offset in plan)
    bps = int(bwlimit or 0)
    if source.node is None:
        origin = LocalSource(lambda: file_stream(source.path, plan, bps), source.path)
    else:
        origin = NodeSource(source.node, ["files", source.path.rstrip("/"), plan, bps])
    order = sorted(needy, key=lambda n: n.rank if n.rank is not None else 1 << 20)
    hops = [Hop(t, ["files", root, STAGE_CACHE, {name: [manifest[name], sizes[name]]
                                                for name in report.nodes[t.name].needed}])
            for t in order]
    on_event(f"chain {report.chains}: {len(plan)} file(s), {size_text(stream_bytes)} from "
             f"{source.label} through {' -> '.join(t.name for t in order)}"
             + (f", limited to {bps / 2**20:.1f} MiB/s" if bps else ""))
    run = run_chain(fleet, origin, hops, python=python, timeout=timeout,
                    on_progress=lambda node, done: on_progress(node, done, stream_bytes))
    report.bytes_sent += int(run.source_report.get("bytes", 0))
    source_error = (run.source_report.get("read_error") if source.node is None
                    else relay_error(run.source, run.source_report))
    if source_error:
        report.problems.append(f"{source.label}: {source_error}")
    for t in order:
        n, result, data = report.nodes[t.name], run.results[t.name], run.reports[t.name]
        n.received += int(data.get("bytes", 0))
        files = ((data.get("sink") or {}).get("result") or {}).get("files") or {}
        for name, entry in files.items():
            if entry.get("state") == "ok":
                n.copied.append(name)
                if entry.get("resumed_from"):
                    n.resumed[name] = entry["resumed_from"]
        if result.status == "unreachable":
            n.state, n.error = "unreachable", result.error
        elif not result.ok and not data:
            n.error = (f"the relay on {t.name} ended without a report (killed, or the node "
                       "went away); partial files stay for the next run")
        elif not result.ok:
            n.error = relay_error(result, data)
        else:
            n.error = None

