"""Engine images without a registry: one right image ID per ref, moved in a pipelined chain.

Which image is right (`resolve_images`, pure): the docker-save tar named for the engine on
the control machine if there is one, else the head node's, else the one every node that
has the ref agrees on. Nodes that already hold that ID get nothing.

How it moves (`distribute`): the source sends the stream ONCE; every target loads it
while forwarding the same bytes to the next target (source -> T1 -> T2 -> ... -> Tn), so
the time approaches one single-link send rather than n of them. Each hop is a small
Python relay on the node (stdlib only): it listens on the node's RoCE address on a port
picked for this transfer, takes only a connection that presents this transfer's token,
pipes into `docker load` and forwards. From a tar on the control machine the first hop
is fed over SSH. Targets still missing the ID afterwards (a broken link upstream) get one
more chain from the source; a node that cannot be reached is left out and reported.
"""

from __future__ import annotations

import hashlib
import json
import secrets as token_source
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from sparkrack.fleet import Fleet, NodeResult, quote_argv
from sparkrack.fleet_channel import close_quietly, deadline
from sparkrack.fleet_ssh import explain, lost_reason, open_client
from sparkrack.inventory import Node
from sparkrack.facts.provision import NodeFacts, normalize_ref
from sparkrack.provision.plan import ImageTarget, short_id
from sparkrack.fleet_results import last_json_object

DEFAULT_PYTHON = "/usr/bin/python3"
PORT_RANGE = (42100, 42900)
CHUNK = 1 << 20

RELAY = r'''
import json, queue, socket, subprocess, sys, threading, time
CHUNK = 1 << 20
WAIT = 60.0

class Out(threading.Thread):
    """One output (docker load or the next hop) fed by a bounded queue, in its own thread."""
    def __init__(self, opener):
        super().__init__(daemon=True)
        self.opener, self.q, self.error, self.result = opener, queue.Queue(8), None, None
    def run(self):
        try:
            write, close = self.opener()
        except Exception as e:
            self.error, write, close = "cannot open: %s" % e, None, None
        while True:
            chunk = self.q.get()
            if chunk is None:
                break
            if self.error is None:
                try:
                    write(chunk)
                except Exception as e:
                    self.error = str(e) or type(e).__name__
        if close is not None:
            try:
                self.result = close()
            except Exception as e:
                self.error = self.error or str(e)
    def put(self, chunk):
        if self.error is None or chunk is None:
            self.q.put(chunk)

def docker_load():
    p = subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    def close():
        p.stdin.close()
        out = p.stdout.read().decode(errors="replace").strip()
        return {"rc": p.wait(), "output": out[-300:]}
    return p.stdin.write, close

def forward(addr, port, token):
    def opener():
        end = time.monotonic() + WAIT
        while True:
            try:
                s = socket.create_connection((addr, int(port)), timeout=5)
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        s.settimeout(300)
        s.sendall(token.encode() + b"\n")
        def close():
            s.shutdown(socket.SHUT_WR)
            s.settimeout(600)
            while s.recv(65536):
                pass
            s.close()
        return s.sendall, close
    return opener

def accept(addr, port, token):
    srv = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, int(port)))
    srv.listen(4)
    end = time.monotonic() + WAIT
    while True:
        srv.settimeout(max(0.1, end - time.monotonic()))
        conn, _ = srv.accept()
        conn.settimeout(300)
        line = b""
        while not line.endswith(b"\n") and len(line) < 200:
            got = conn.recv(1)
            if not got:
                break
            line += got
        if line.strip() == token.encode():
            srv.close()
            return conn
        conn.close()

def main(argv):
    mode, report, saver = argv[0], {"bytes": 0}, None
    token = sys.stdin.buffer.readline().strip().decode()  # never in argv: `ps` shows argv
    if mode == "save":
        ref, nxt = argv[1], argv[2:4] + [token]
        saver = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        read, load = saver.stdout.read, False
    elif mode == "recv":
        addr, port, load, nxt = argv[1], argv[2], argv[3] == "1", argv[4:6] + [token]
        conn = accept(addr, port, token)
        read = lambda n: conn.recv(n)
    else:  # stdin: the image follows the token line
        load, nxt = argv[1] == "1", argv[2:4] + [token]
        read = sys.stdin.buffer.read
    outs = {}
    if load:
        outs["load"] = Out(docker_load)
    if len(nxt) == 3:
        outs["forward"] = Out(forward(*nxt))
    for out in outs.values():
        out.start()
    try:
        while True:
            chunk = read(CHUNK)
            if not chunk:
                break
            report["bytes"] += len(chunk)
            for out in outs.values():
                out.put(chunk)
    except Exception as e:
        report["read_error"] = str(e) or type(e).__name__
    for out in outs.values():
        out.put(None)
    for name, out in outs.items():
        out.join()
        report[name] = {"error": out.error, "result": out.result}
    if mode == "recv":
        try:
            conn.close()
        except Exception:
            pass
    if saver is not None:
        err = saver.stderr.read().decode(errors="replace").strip()
        report["save"] = {"rc": saver.wait(), "error": err[-300:]}
    ok = "read_error" not in report
    if load:
        res = report["load"]["result"] or {}
        ok = ok and report["load"]["error"] is None and res.get("rc") == 0
    if saver is not None:
        ok = ok and report["save"]["rc"] == 0 and report.get("forward", {}).get("error") is None
    print(json.dumps(report))
    return 0 if ok else 1

sys.exit(main(sys.argv[1:]))
'''


# --- Which image is right ------------------------------------------------------------------


@dataclass(frozen=True)
class TarImage:
    """The image a docker-save tar holds for a ref."""

    image_id: str
    tags: tuple[str, ...]


_TAR_CACHE: dict[tuple[str, int, int, str], TarImage] = {}


def tar_image(path: str | Path, ref: str) -> TarImage:
    """The ID of ref's image in a docker-save tar (sha256 of its config); ValueError if the
    tar is unreadable or does not hold ref."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as error:
        raise ValueError(f"source tar {path}: {error.strerror}") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns, normalize_ref(ref))
    if key in _TAR_CACHE:
        return _TAR_CACHE[key]
    try:
        with tarfile.open(path, "r:") as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
            wanted = normalize_ref(ref)
            entries = [e for e in manifest
                       if wanted in {normalize_ref(t) for t in e.get("RepoTags") or []}]
            if not entries:
                tags = [t for e in manifest for t in e.get("RepoTags") or []]
                raise ValueError(f"source tar {path} holds {', '.join(tags) or 'no tag'}, "
                                 f"not {ref}")
            config = tar.extractfile(entries[0]["Config"]).read()
    except (OSError, tarfile.TarError, KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"source tar {path}: not a docker-save archive ({error})") from None
    image = TarImage("sha256:" + hashlib.sha256(config).hexdigest(),
                     tuple(entries[0].get("RepoTags") or ()))
    _TAR_CACHE[key] = image
    return image


def resolve_images(wanted: Mapping[str, str], facts: Mapping[str, NodeFacts],
                   order: Sequence[str], head: str, *, read_tar=tar_image
                   ) -> dict[str, ImageTarget]:
    """{normalized ref: ImageTarget} for wanted {ref: source tar path or ''}.

    facts holds the gathered nodes (the head among them when it is the source); order is
    the rack's node names by rank.
    """
    targets: dict[str, ImageTarget] = {}
    for ref, tar in wanted.items():
        key = normalize_ref(ref)
        if tar:
            try:
                targets[key] = ImageTarget(key, read_tar(tar, ref).image_id, f"tar:{tar}")
            except ValueError as error:
                targets[key] = ImageTarget(key, None, error=str(error))
            continue
        head_facts = facts.get(head)
        if head_facts is not None and head_facts.images and key in head_facts.images:
            targets[key] = ImageTarget(key, head_facts.images[key], f"node:{head}")
            continue
        holders = {name: facts[name].images[key] for name in order
                   if name in facts and facts[name].images and key in facts[name].images}
        ids = set(holders.values())
        if len(ids) == 1:
            source = next(iter(holders))
            targets[key] = ImageTarget(key, ids.pop(), f"node:{source}")
        elif not ids:
            targets[key] = ImageTarget(key, None, error=(
                f"no node has {key} and no source tar is set: load it on {head} "
                "(docker load < IMAGE.tar) or set image_sources in the inventory"))
        else:
            listing = ", ".join(f"{n}={short_id(i)}" for n, i in holders.items())
            targets[key] = ImageTarget(key, None, error=(
                f"nodes disagree on {key} ({listing}) and the head {head} has none: "
                f"load the right one on {head}"))
    return targets


# --- How it moves --------------------------------------------------------------------------


@dataclass
class TransferReport:
    """One image's distribution: per target node an error or None, bytes and time."""

    ref: str
    image_id: str
    source: str
    targets: tuple[str, ...]
    errors: dict[str, str | None] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    bytes_sent: int = 0  # bytes that left the source (once per chain)
    bytes_moved: int = 0  # bytes received over all hops
    seconds: float = 0.0
    chains: int = 0

    @property
    def ok(self) -> tuple[str, ...]:
        return tuple(n for n in self.targets if self.errors.get(n) is None)


def _relay_argv(python: str, *args: str) -> list:
    return [python, "-c", RELAY, *args]



def _relay_error(result: NodeResult, data: dict) -> str | None:
    if result.status == "ok":
        return None
    if result.status == "unreachable":
        return result.error or "unreachable"
    load = (data.get("load") or {})
    details = [data.get("read_error"), load.get("error"),
               ((load.get("result") or {}).get("output") if (load.get("result") or {}).get("rc")
                else None)]
    text = "; ".join(str(d) for d in details if d)
    tail = (result.stderr.strip().splitlines() or [""])[-1]
    return f"relay failed: {text or tail or result.error}"


def stream_file(fleet: Fleet, node: Node, argv: Sequence, path: Path,
                timeout: float, first_line: bytes = b"") -> NodeResult:
    """Run argv on node with first_line (a token, say) and then the file at path as its
    stdin, streamed (never all in memory)."""
    started = time.monotonic()
    try:
        client = open_client(node, fleet.known_hosts)
    except (paramiko.SSHException, OSError, EOFError) as error:
        return NodeResult(node.name, "unreachable", error=explain(node, fleet.known_hosts, error))
    try:
        channel = client.get_transport().open_session(timeout=node.vars.ssh_connect_timeout)
        out: list[bytes] = []
        err: list[bytes] = []
        with deadline(timeout, lambda: close_quietly(channel)) as fired:
            channel.exec_command(quote_argv(argv))
            readers = [threading.Thread(target=_drain, args=(channel.recv, out), daemon=True),
                       threading.Thread(target=_drain, args=(channel.recv_stderr, err),
                                        daemon=True)]
            for reader in readers:
                reader.start()
            try:
                channel.sendall(first_line)
                with open(path, "rb") as source:
                    while chunk := source.read(CHUNK):
                        channel.sendall(chunk)
                channel.shutdown_write()
            except OSError:
                pass  # the remote side ended early; its exit status says why
            for reader in readers:
                reader.join()
            channel.status_event.wait(timeout)
        code = channel.exit_status if channel.exit_status != -1 else None
        stdout, stderr = b"".join(out).decode(errors="replace"), b"".join(err).decode(
            errors="replace")
        if code == 0:
            return NodeResult(node.name, "ok", 0, stdout, stderr,
                              duration=time.monotonic() - started)
        lost = lost_reason(client.get_transport())
        if lost:
            return NodeResult(node.name, "unreachable", None, stdout, stderr,
                              duration=time.monotonic() - started,
                              error=f"{node.name}: image stream broke off: the node stopped "
                              f"answering ({lost})")
        why = "timed out" if fired.is_set() else f"exited {code}"
        return NodeResult(node.name, "failed", code, stdout, stderr,
                          duration=time.monotonic() - started,
                          error=f"{node.name}: image stream {why}")
    except (paramiko.SSHException, OSError, EOFError) as error:
        return NodeResult(node.name, "unreachable", error=f"{node.name}: image stream: {error}")
    finally:
        client.close()


def _drain(recv, into: list[bytes]) -> None:
    try:
        while chunk := recv(65536):
            into.append(chunk)
    except (OSError, EOFError):
        pass


def _chain(fleet: Fleet, target: ImageTarget, nodes: Sequence[Node], python: str,
           timeout: float) -> tuple[dict[str, NodeResult], NodeResult | None]:
    """One pipelined chain source -> nodes[0] -> ... -> nodes[-1]; results per node and the
    source's result."""
    port = str(PORT_RANGE[0] + token_source.randbelow(PORT_RANGE[1] - PORT_RANGE[0]))
    token = token_source.token_hex(16)  # every relay reads it from stdin, never from argv
    commands: dict[str, list] = {}
    for index, node in enumerate(nodes):
        after = nodes[index + 1] if index + 1 < len(nodes) else None
        forward = [after.roce_addr, port] if after else []
        if index == 0 and target.source.startswith("tar:"):
            continue  # fed over SSH from this machine below
        commands[node.name] = _relay_argv(python, "recv", node.roce_addr, port, "1", *forward)
    source_result: NodeResult | None = None
    kind, _, where = target.source.partition(":")
    first = nodes[0]
    first_forward = [nodes[1].roce_addr, port] if len(nodes) > 1 else []
    with ThreadPoolExecutor(max_workers=2) as pool:
        if kind == "tar":
            fed = pool.submit(stream_file, fleet, first,
                              _relay_argv(python, "stdin", "1", *first_forward), Path(where),
                              timeout, first_line=token.encode() + b"\n")
        else:
            commands[where] = _relay_argv(python, "save", target.ref, first.roce_addr, port)
        relays = fleet.run(commands, timeout=timeout, stdin=token.encode() + b"\n") \
            if commands else None
        results = {r.node: r for r in relays} if relays else {}
        if kind == "tar":
            results[first.name] = fed.result()
        else:
            source_result = results.pop(where, None)
    return results, source_result


def distribute(fleet: Fleet, target: ImageTarget, nodes: Sequence[Node], *,
               python: str = DEFAULT_PYTHON, timeout: float = 3600.0,
               attempts: int = 2) -> TransferReport:
    """Bring target's image onto nodes (a pipelined chain), verify the ID on each."""
    report = TransferReport(target.ref, target.image_id or "", target.source,
                            tuple(n.name for n in nodes))
    started = time.monotonic()
    pending = list(nodes)
    for _ in range(attempts):
        if not pending:
            break
        report.chains += 1
        results, source = _chain(fleet, target, pending, python, timeout)
        if source is not None:
            data = last_json_object(source.stdout)
            report.bytes_sent += int(data.get("bytes", 0))
            if source.status == "unreachable":
                for node in pending:
                    report.errors[node.name] = f"source {target.source} unreachable"
                break
        for node in pending:
            result = results.get(node.name)
            data = last_json_object(result.stdout) if result else {}
            report.bytes_moved += int(data.get("bytes", 0))
            if result is not None and result.status == "unreachable":
                report.unreachable.add(node.name)
            if target.source.startswith("tar:") and node is pending[0] and result is not None:
                report.bytes_sent += int(data.get("bytes", 0))
            report.errors[node.name] = _relay_error(result, data) if result else "not run"
        present = verify(fleet, target, [n for n in pending if n.name not in report.unreachable])
        for node in pending:
            if node.name in present:
                report.errors[node.name] = (None if present[node.name] == target.image_id else
                                            report.errors[node.name] or
                                            f"has {short_id(present[node.name] or 'none')} "
                                            f"after the transfer")
        pending = [n for n in pending if report.errors.get(n.name) is not None
                   and n.name not in report.unreachable]
    report.seconds = time.monotonic() - started
    return report


def verify(fleet: Fleet, target: ImageTarget, nodes: Sequence[Node]) -> dict[str, str | None]:
    """{node: the image ID it has for target.ref, or None} over one round trip."""
    if not nodes:
        return {}
    argv = ["docker", "image", "inspect", "--format", "{{.Id}}", target.ref]
    results = fleet.run({n.name: argv for n in nodes}, timeout=60)
    return {r.node: (r.stdout.strip() or None) if r.ok else None for r in results
            if r.status != "unreachable"}
