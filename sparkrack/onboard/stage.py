"""Step 4, stage: the rack's engine images and model weights onto the new node, from a peer.

Images: the ID the rack runs for each ref (the head's, else the one the members agree
on; provision/images.py `resolve_images`), moved by the provisioning image chain
(`distribute`) from a peer that has it. A node that has the ID gets nothing.

Weights: the rack keeps a checksum manifest, `{model_path}/sparkrack-manifest.sha256`
(`sha256sum` lines, paths relative to model_path). The members' manifests are compared;
the majority's is the rack's. The new node hashes what it already has (a file whose
size, mtime and inode match a hash it recorded in STAGE_CACHE is not read again) and the
plan is what is missing or wrong. The data goes peer -> new node directly, over the
fabric (roce_addr): the nodes hold no SSH keys to each other (and should not), so, like
the image relay, the new node listens on a port picked for this transfer and accepts only
connections that present this transfer's token; the peer connects and streams each
file's missing part (`socket.sendfile`, zero copy; --bwlimit throttles it to spare the
fabric of a serving rack). The receiver hashes while it writes into
`.NAME.sparkrack-partial`, and renames a file into place only when its SHA-256 matches
the manifest. Interrupted (Ctrl-C, cut link, dead node), the partial files stay: the next
run hashes what they hold and asks the peer only for the rest. The manifest itself is
written last, once every file checks out: a node with the manifest is complete.

The stream is not encrypted (the image relay's trade-off, on the rack's private fabric);
its integrity is the manifest's SHA-256, end to end.
"""

from __future__ import annotations

import json
import re
import secrets as token_source
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from sparkrack.fleet import Fleet, NodeResult
from sparkrack.inventory import Node
from sparkrack.provision.changes import ImageTarget, short_id
from sparkrack.provision.images import (
    DEFAULT_PYTHON,
    PORT_RANGE,
    TransferReport,
    distribute,
    resolve_images,
)
from sparkrack.fleet_results import last_json_object

MANIFEST_NAME = "sparkrack-manifest.sha256"
STAGE_CACHE = "/var/lib/sparkrack/stage-verified.json"
_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")

STAGER = r'''
import fcntl, hashlib, json, os, socket, sys, threading, time
CHUNK = 1 << 20
LOCK = ".sparkrack-stage.lock"
WAIT = 60.0
STALL = 120.0

def partial_path(root, name):
    head, tail = os.path.split(os.path.join(root, name))
    return os.path.join(head, "." + tail + ".sparkrack-partial")

def load_cache(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except Exception:
        return {}

def save_cache(path, cache):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(cache, f)
        os.replace(tmp, path)
    except Exception:
        pass

def stamp(path):
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]

def sha_of(path, limit=None):
    h, left = hashlib.sha256(), limit
    with open(path, "rb", buffering=0) as f:
        while left is None or left > 0:
            chunk = f.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h

def sizes(root):
    names = json.load(sys.stdin)
    out = {}
    for name in names:
        try:
            st = os.stat(os.path.join(root, name))
            out[name] = st.st_size if os.path.isfile(os.path.join(root, name)) else None
        except OSError:
            out[name] = None
    print(json.dumps(out))
    return 0

def locked(root):
    """An exclusive lock on root's staging (None: another transfer holds it)."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd

def busy(root):
    """Whether a transfer holds root's lock (checked without creating anything)."""
    path = os.path.join(root, LOCK)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)

def check(root, cache_path, full, save):
    files = json.load(sys.stdin)
    if busy(root):
        print(json.dumps({"busy": True}))
        return 0
    cache = load_cache(cache_path)
    out, hashed = {}, 0
    for name, sha, size in files:
        path = os.path.join(root, name)
        entry = {"state": "need", "offset": 0, "why": "missing", "hashed": False}
        if os.path.isfile(path):
            st = stamp(path)
            if st[0] != size:
                entry["why"] = "size %d, manifest %d" % (st[0], size)
            else:
                known = cache.get(path)
                if full == "0" and known == st + [sha]:
                    entry = {"state": "ok", "offset": size, "why": "verified before", "hashed": False}
                else:
                    got = sha_of(path).hexdigest()
                    hashed += size
                    if got == sha:
                        cache[path] = st + [sha]
                        entry = {"state": "ok", "offset": size, "why": "hashed", "hashed": True}
                    else:
                        cache.pop(path, None)
                        entry["why"] = "sha256 differs from the manifest"
        if entry["state"] == "need":
            part = partial_path(root, name)
            if os.path.isfile(part):
                have = os.path.getsize(part)
                if have <= size:
                    entry["offset"] = have
                    entry["why"] += "; partial %d of %d bytes" % (have, size)
        out[name] = entry
    if save == "1":
        save_cache(cache_path, cache)
    print(json.dumps({"files": out, "hashed_bytes": hashed}))
    return 0

def accept_all(addr, port, token, streams):
    srv = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, int(port)))
    srv.listen(8)
    conns, end = {}, time.monotonic() + WAIT
    while len(conns) < streams:
        srv.settimeout(max(0.1, end - time.monotonic()))
        conn, _ = srv.accept()
        conn.settimeout(WAIT)
        line = b""
        while not line.endswith(b"\n") and len(line) < 200:
            got = conn.recv(1)
            if not got:
                break
            line += got
        parts = line.decode(errors="replace").split()
        if len(parts) == 2 and parts[0] == token and parts[1].isdigit() and int(parts[1]) < streams:
            conn.settimeout(STALL)
            conns[int(parts[1])] = conn
        else:
            conn.close()
    srv.close()
    return conns

def read_line(conn):
    line = b""
    while not line.endswith(b"\n"):
        got = conn.recv(1)
        if not got:
            return None
        line += got
        if len(line) > 65536:
            return None
    return line

def recv_stream(conn, root, items, cache, lock, out):
    for name, sha, size, offset, stream in items:
        res = out[name] = {"state": "incomplete", "received": 0}
        try:
            header = read_line(conn)
            if header is None:
                res["error"] = "the sender closed the stream before this file"
                return
            meta = json.loads(header)
            if meta.get("name") != name or meta.get("offset") != offset:
                res["error"] = "unexpected header %r" % header[:200]
                return
            path = os.path.join(root, name)
            part = partial_path(root, name)
            os.makedirs(os.path.dirname(part), exist_ok=True)
            mode = "r+b" if os.path.exists(part) else "w+b"
            with open(part, mode, buffering=0) as f:
                f.truncate(offset)
                h = sha_of(part, offset) if offset else hashlib.sha256()
                f.seek(offset)
                left = size - offset
                while left > 0:
                    chunk = conn.recv(min(CHUNK, left))
                    if not chunk:
                        break
                    f.write(chunk)
                    h.update(chunk)
                    left -= len(chunk)
                    res["received"] += len(chunk)
                if left > 0:
                    res["error"] = "stream ended with %d bytes to go" % left
                    return
                os.fsync(f.fileno())
            if h.hexdigest() != sha:
                os.unlink(part)
                res["state"] = "mismatch"
                res["error"] = "sha256 %s differs from the manifest's %s" % (h.hexdigest()[:16], sha[:16])
                continue
            os.replace(part, path)
            with lock:
                cache[path] = stamp(path) + [sha]
            res["state"] = "ok"
        except Exception as e:
            res["error"] = "%s: %s" % (type(e).__name__, e)
            return

def recv(addr, port, root, cache_path, streams):
    token = sys.stdin.readline().strip()  # stdin: the token line, then the plan (never argv)
    plan = json.load(sys.stdin)
    streams = int(streams)
    report = {"files": {}}
    hold = locked(root)
    if hold is None:
        report["error"] = "another transfer is writing into %s (an interrupted run still going?)" % root
        print(json.dumps(report))
        return 1
    cache, lock, out = load_cache(cache_path), threading.Lock(), {}
    report = {"files": out}
    try:
        conns = accept_all(addr, port, token, streams)
    except Exception as e:
        report["error"] = "no connection from the peer: %s" % (e or type(e).__name__)
        print(json.dumps(report))
        return 1
    threads = []
    for index in range(streams):
        items = [p for p in plan if p[4] == index]
        t = threading.Thread(target=recv_stream, args=(conns[index], root, items, cache, lock, out))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for c in conns.values():
        c.close()
    save_cache(cache_path, cache)
    report["bytes"] = sum(r.get("received", 0) for r in out.values())
    print(json.dumps(report))
    return 0 if all(r["state"] == "ok" for r in out.values()) and len(out) == len(plan) else 1

def send_stream(addr, port, token, index, root, items, bwlimit, out):
    end = time.monotonic() + WAIT
    while True:
        try:
            s = socket.create_connection((addr, int(port)), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > end:
                out["errors"].append("stream %d: cannot connect: %s" % (index, e))
                return
            time.sleep(0.1)
    s.settimeout(STALL)
    try:
        s.sendall(("%s %d\n" % (token, index)).encode())
        for name, sha, size, offset, stream in items:
            s.sendall((json.dumps({"name": name, "offset": offset}) + "\n").encode())
            with open(os.path.join(root, name), "rb") as f:
                if bwlimit <= 0:
                    sent = s.sendfile(f, offset, size - offset) if size > offset else 0
                else:
                    f.seek(offset)
                    sent, start, step = 0, time.monotonic(), max(4096, min(CHUNK, int(bwlimit / 10)))
                    while sent < size - offset:
                        chunk = f.read(min(step, size - offset - sent))
                        if not chunk:
                            break
                        s.sendall(chunk)
                        sent += len(chunk)
                        ahead = sent / bwlimit - (time.monotonic() - start)
                        if ahead > 0:
                            time.sleep(ahead)
            out["bytes"] += sent
            if sent != size - offset:
                out["errors"].append("%s: sent %d of %d bytes (changed on the peer?)" % (name, sent, size - offset))
                return
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except Exception as e:
        out["errors"].append("stream %d: %s: %s" % (index, type(e).__name__, e))
    finally:
        s.close()

def send(addr, port, root, streams, bwlimit):
    token = sys.stdin.readline().strip()  # stdin: the token line, then the plan (never argv)
    plan = json.load(sys.stdin)
    out = {"bytes": 0, "errors": []}
    threads = [threading.Thread(target=send_stream, args=(addr, port, token, i, root,
               [p for p in plan if p[4] == i], float(bwlimit) / int(streams), out))
               for i in range(int(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))
    return 0 if not out["errors"] else 1

mode, args = sys.argv[1], sys.argv[2:]
sys.exit({"sizes": sizes, "check": check, "recv": recv, "send": send}[mode](*args))
'''


# --- The manifest (pure) -----------------------------------------------------------------


class ManifestError(ValueError):
    """A manifest line that is not `SHA256  relative/path`."""


def parse_manifest(text: str) -> dict[str, str]:
    """{relative path: sha256} of a `sha256sum` manifest; ManifestError for a bad line or a
    path that leaves the model directory."""
    files: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line.rstrip("\r"))
        if not match:
            raise ManifestError(f"line {number}: not `SHA256  PATH`: {line[:80]!r}")
        digest, name = match.group(1).lower(), match.group(2)
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise ManifestError(f"line {number}: {name!r} leaves the model directory")
        name = str(path)
        if name in (".", MANIFEST_NAME) or path.name.endswith(".sparkrack-partial"):
            raise ManifestError(f"line {number}: {name!r} cannot be a model file")
        if name in files and files[name] != digest:
            raise ManifestError(f"line {number}: {name} listed twice with different hashes")
        files[name] = digest
    if not files:
        raise ManifestError("no file listed")
    return files


def assign_streams(sizes: Mapping[str, int], streams: int) -> dict[str, int]:
    """{name: stream index}: largest files first, each to the least loaded stream."""
    load = [0] * max(1, streams)
    assigned = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        index = min(range(len(load)), key=lambda i: (load[i], i))
        assigned[name] = index
        load[index] += sizes[name]
    return assigned


def rack_manifest(texts: Mapping[str, str | None]) -> tuple[str | None, list[str], list[str]]:
    """(the majority's manifest text, the members holding it, members that differ or have
    none) from {member: manifest text or None}."""
    counts: dict[str, list[str]] = {}
    for node, text in texts.items():
        if text:
            counts.setdefault(text, []).append(node)
    if not counts:
        return None, [], list(texts)
    text, holders = max(counts.items(), key=lambda item: len(item[1]))
    return text, holders, [n for n in texts if n not in holders]


# --- Weights -------------------------------------------------------------------------------


@dataclass
class WeightsReport:
    """What staging the weights found and did."""

    source: str
    target: str
    model_path: str
    files: int = 0
    total_bytes: int = 0
    present: list[str] = field(default_factory=list)
    needed: dict[str, int] = field(default_factory=dict)  # name -> resume offset
    copied: list[str] = field(default_factory=list)
    resumed: dict[str, int] = field(default_factory=dict)  # name -> offset it resumed from
    bytes_sent: int = 0
    hashed_bytes: int = 0  # read back on the new node to check what it already had
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    verified: bool = False  # every manifest file checks out and the manifest is written

    @property
    def bytes_needed(self) -> int:
        return sum(self._sizes.get(n, 0) - off for n, off in self.needed.items())

    _sizes: dict[str, int] = field(default_factory=dict, repr=False)

    def summary(self) -> str:
        total = size_text(self.total_bytes)
        if self.errors:
            return f"{len(self.errors)} problem(s): {self.errors[0]}"
        if self.verified:
            return (f"{self.files} files ({total}) verified against {MANIFEST_NAME}: "
                    f"{len(self.present)} present, {len(self.copied)} copied from "
                    f"{self.source} ({size_text(self.bytes_sent)} sent"
                    f"{', resumed ' + str(len(self.resumed)) if self.resumed else ''}) in "
                    f"{self.seconds:.1f} s")
        return (f"{self.files} files ({total}): {len(self.present)} present, "
                f"{len(self.needed)} to copy from {self.source} "
                f"({size_text(self.bytes_needed)}"
                f"{', ' + str(sum(1 for o in self.needed.values() if o)) + ' resumed' if any(self.needed.values()) else ''})")


def size_text(count: int) -> str:
    """Bytes as people read them: 812 B, 130.4 KiB, 61.6 MiB, 3.00 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}" if unit == "GiB" else f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _stager(python: str, *args) -> list:
    return [python, "-c", STAGER, *args]



def read_manifests(fleet: Fleet, nodes: Sequence[Node], model_path: str) -> dict[str, str | None]:
    """{node: its manifest text, or None} (one small read per node)."""
    path = f"{model_path.rstrip('/')}/{MANIFEST_NAME}"
    results = fleet.run({n.name: ["cat", path] for n in nodes}, timeout=30)
    return {r.node: r.stdout if r.ok and r.stdout.strip() else None for r in results}


def stage_weights(fleet: Fleet, source: Node, target: Node, model_path: str,
                  manifest_text: str, *, python: str = DEFAULT_PYTHON, streams: int = 2,
                  bwlimit: float | None = None, full_verify: bool = False, check: bool = False,
                  timeout: float = 24 * 3600.0,
                  on_event: Callable[[str], None] = lambda line: None) -> WeightsReport:
    """Bring the manifest's files onto target from source; see the module doc.

    check: plan only (what is present, what would be copied). Never raises for a node's
    failure: report.errors says what went wrong."""
    started = time.monotonic()
    root = model_path.rstrip("/") or "/"
    report = WeightsReport(source.name, target.name, root)
    try:
        manifest = parse_manifest(manifest_text)
    except ManifestError as error:
        report.errors.append(f"{MANIFEST_NAME} of the rack: {error}")
        return report
    names = sorted(manifest)
    result = fleet.run({source.name: _stager(python, "sizes", root)},
                       stdin=json.dumps(names).encode(), timeout=120)[source.name]
    sizes = last_json_object(result.stdout)
    if not result.ok or not sizes:
        report.errors.append(f"{source.name}: cannot list the model files: {result.error}")
        return report
    missing = [n for n in names if sizes.get(n) is None]
    if missing:
        report.errors.append(f"{source.name} lacks {len(missing)} manifest file(s) under {root}"
                             f" (e.g. {missing[0]}): choose another peer (--peer)")
        return report
    report.files, report.total_bytes, report._sizes = len(names), sum(sizes.values()), sizes
    plan = _check(fleet, target, root, manifest, sizes, python, full_verify, report,
                  readonly=check)
    if plan is None:
        return report
    report.needed = {name: entry["offset"] for name, entry in plan.items()
                     if entry["state"] != "ok"}
    report.present = [name for name in names if name not in report.needed]
    on_event(f"weights: {report.summary()}")
    if check:
        report.seconds = time.monotonic() - started
        return report
    if report.needed:
        _transfer(fleet, source, target, root, manifest, sizes, report, python, streams,
                  bwlimit, timeout, on_event)
        if report.errors:
            report.seconds = time.monotonic() - started
            return report
        again = _check(fleet, target, root, manifest, sizes, python, False, report)
        if again is None:
            report.seconds = time.monotonic() - started
            return report
        bad = [n for n, e in again.items() if e["state"] != "ok"]
        if bad:
            report.errors.append(f"{target.name}: {len(bad)} file(s) still wrong after the "
                                 f"copy, e.g. {bad[0]}: {again[bad[0]]['why']}")
            report.seconds = time.monotonic() - started
            return report
    if read_manifests(fleet, [target], root).get(target.name) == manifest_text:
        report.verified = True  # complete before this run: nothing to write
        report.seconds = time.monotonic() - started
        return report
    written = fleet.put({target.name: [(manifest_text.encode(), f"{root}/{MANIFEST_NAME}",
                                        0o644)]}, timeout=60)[target.name]
    if not written.ok:
        report.errors.append(f"{target.name}: cannot write the manifest: {written.error}")
    else:
        report.verified = True
    report.seconds = time.monotonic() - started
    return report


def _check(fleet: Fleet, target: Node, root: str, manifest: Mapping[str, str],
           sizes: Mapping[str, int], python: str, full: bool,
           report: WeightsReport, readonly: bool = False) -> dict[str, dict] | None:
    """The target's view of each manifest file (hashing what it has), or None on failure."""
    files = [[name, manifest[name], sizes[name]] for name in sorted(manifest)]
    result = fleet.run({target.name: _stager(python, "check", root, STAGE_CACHE,
                                             "1" if full else "0", "0" if readonly else "1")},
                       stdin=json.dumps(files).encode(), timeout=24 * 3600)[target.name]
    data = last_json_object(result.stdout)
    if data.get("busy"):
        report.errors.append(f"{target.name}: a transfer into {root} is still running (an "
                             "interrupted onboard's receiver finishing its file?): wait a "
                             "minute and run again")
        return None
    if not result.ok or "files" not in data:
        report.errors.append(f"{target.name}: cannot check the model files: "
                             f"{result.error or result.stderr.strip()[-200:]}")
        return None
    report.hashed_bytes += int(data.get("hashed_bytes", 0))
    return data["files"]


def _transfer(fleet: Fleet, source: Node, target: Node, root: str, manifest: Mapping[str, str],
              sizes: Mapping[str, int], report: WeightsReport, python: str, streams: int,
              bwlimit: float | None, timeout: float, on_event: Callable[[str], None]) -> None:
    """One peer -> new node transfer of report.needed (receiver listens, peer connects)."""
    needed = {name: sizes[name] - offset for name, offset in report.needed.items()}
    streams = max(1, min(streams, len(needed)))
    lanes = assign_streams(needed, streams)
    plan = [[name, manifest[name], sizes[name], report.needed[name], lanes[name]]
            for name in sorted(needed, key=lambda n: (lanes[n], -needed[n], n))]
    port = str(PORT_RANGE[0] + token_source.randbelow(PORT_RANGE[1] - PORT_RANGE[0]))
    token = token_source.token_hex(16)  # on stdin, never in argv (which `ps` shows)
    stdin = token.encode() + b"\n" + json.dumps(plan).encode()
    on_event(f"weights: {size_text(sum(needed.values()))} from {source.name} to "
             f"{target.name} over {target.roce_addr}:{port}, {streams} stream(s)"
             + (f", limited to {bwlimit / 2**20:.1f} MiB/s" if bwlimit else ""))
    received: dict[str, NodeResult] = {}

    def receive() -> None:
        received["r"] = fleet.run({target.name: _stager(
            python, "recv", target.roce_addr, port, root, STAGE_CACHE, str(streams))},
            stdin=stdin, timeout=timeout)[target.name]

    receiver = threading.Thread(target=receive, name="stage-recv", daemon=True)
    receiver.start()
    sent = fleet.run({source.name: _stager(python, "send", target.roce_addr, port, root,
                                           str(streams), str(int(bwlimit or 0)))},
                     stdin=stdin, timeout=timeout)[source.name]
    receiver.join()
    got = received["r"]
    sent_data, got_data = last_json_object(sent.stdout), last_json_object(got.stdout)
    report.bytes_sent = int(sent_data.get("bytes", 0))
    for name, entry in (got_data.get("files") or {}).items():
        if entry.get("state") == "ok":
            report.copied.append(name)
            if report.needed.get(name):
                report.resumed[name] = report.needed[name]
        elif entry.get("error"):
            report.errors.append(f"{target.name}: {name}: {entry['error']}")
    if got_data.get("error"):
        report.errors.append(f"{target.name}: {got_data['error']}")
    report.errors += [f"{source.name}: {e}" for e in sent_data.get("errors", [])]
    for result, side, role in ((sent, "peer", "sender"), (got, "new node", "receiver")):
        if result.status == "unreachable":
            report.errors.append(f"{side} {result.node}: {result.error or result.status}")
        elif not result.ok and not last_json_object(result.stdout):
            report.errors.append(f"{side} {result.node}: the {role} ended without a report "
                                 f"(killed, or the node went away); partial files stay for "
                                 "the next run")
    if not report.errors and len(report.copied) != len(needed):
        report.errors.append(f"{target.name}: {len(needed) - len(report.copied)} file(s) not "
                             "received")


# --- Images --------------------------------------------------------------------------------


@dataclass
class ImageOutcome:
    ref: str
    image_id: str | None
    source: str
    present: bool = False
    transfer: TransferReport | None = None
    error: str | None = None

    def line(self) -> str:
        if self.error:
            return f"{self.ref}: {self.error}"
        shown = short_id(self.image_id or "")
        if self.present:
            return f"{self.ref} {shown}: present"
        if self.transfer is None:
            return f"{self.ref} {shown}: would be sent from {self.source}"
        t = self.transfer
        return (f"{self.ref} {shown}: sent from {self.source} "
                f"({size_text(t.bytes_moved)}, {t.seconds:.1f} s)")


def rack_images(refs: Sequence[str], facts: Mapping[str, object], order: Sequence[str],
                head: str) -> dict[str, ImageTarget]:
    """{ref: the rack's image} from the members' gathered images (no source tar: the rack's
    own IDs, never a tar on this machine)."""
    return resolve_images({ref: "" for ref in refs}, facts, order, head)


def stage_images(fleet: Fleet, targets: Mapping[str, ImageTarget], member_facts: Mapping,
                 new: Node, preferred: Sequence[str], *, python: str = DEFAULT_PYTHON,
                 check: bool = False, timeout: float = 3600.0) -> list[ImageOutcome]:
    """Each rack image onto new from the first preferred peer that has its ID."""
    from sparkrack.provision.images import verify

    outcomes = []
    for ref, target in targets.items():
        if target.image_id is None:
            outcomes.append(ImageOutcome(ref, None, "", error=target.error))
            continue
        have = verify(fleet, target, [new]).get(new.name)
        holders = [n for n in preferred if (getattr(member_facts.get(n), "images", None) or {})
                   .get(ref) == target.image_id]
        source = holders[0] if holders else target.source.partition(":")[2]
        outcome = ImageOutcome(ref, target.image_id, source, present=have == target.image_id)
        if not outcome.present and not check:
            chain = ImageTarget(ref, target.image_id, f"node:{source}")
            outcome.transfer = distribute(fleet, chain, [new], python=python, timeout=timeout)
            outcome.error = outcome.transfer.errors.get(new.name)
        outcomes.append(outcome)
    return outcomes
