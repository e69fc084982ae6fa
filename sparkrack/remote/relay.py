"""One hop of the pipelined chain (stdlib only): read a stream once, keep it here, pass it on.
Its settings, its stream of model files and its report: docs/internals.md#a-hop-of-the-chain.
"""

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time

from .handshake import connect, listen
from .stagefiles import (
    CHUNK,
    escape,
    load_cache,
    locked,
    open_nofollow,
    partial_path,
    save_cache,
    sha_of,
    stamp,
    within,
)

STALL = 30.0  # no progress this long on a data socket: given up (a cut link); "stall" overrides
CLOSE_WAIT = 600.0  # after the last byte: how long the next hop may take to finish


class Out(threading.Thread):
    """One output (a sink or the next hop) fed by a bounded queue, in its own thread;
    opener() -> (write(chunk), close(failed) -> result)."""

    def __init__(self, opener):
        super().__init__(daemon=True)
        self.opener, self.q, self.error, self.result = opener, queue.Queue(8), None, None

    def run(self):
        try:
            write, close = self.opener()
        except Exception as e:
            self.error, write, close = "cannot open: %s" % (e or type(e).__name__), None, None
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
                self.result = close(self.error is not None)
            except Exception as e:
                self.error = self.error or str(e) or type(e).__name__

    def put(self, chunk):
        if self.error is None or chunk is None:
            self.q.put(chunk)


def docker_load():
    p = subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)

    def close(failed):
        p.stdin.close()
        out = p.stdout.read().decode(errors="replace").strip()
        return {"rc": p.wait(), "output": out[-300:]}
    return p.stdin.write, close


def forward(addr, port, token, stall):
    def opener():
        s = connect(addr, port, token, 0, stall=stall)

        def close(failed):
            if not failed:  # a dead next hop would never answer: no wait for it
                s.shutdown(1)  # SHUT_WR: the next hop sees the end and finishes
                s.settimeout(CLOSE_WAIT)
                while s.recv(65536):
                    pass
            s.close()
        return s.sendall, close
    return opener


class FileSink:
    """Writes the files this node needs out of a stream of model files."""

    def __init__(self, root, cache_path, wanted):
        self.root, self.cache_path, self.wanted = root, cache_path, wanted
        self.files = {name: {"state": "not received", "received": 0} for name in wanted}
        self.buf, self.cur, self.bytes = b"", None, 0
        self.error = None
        try:
            self.lock = locked(root) if wanted else None
        except OSError as e:  # ELOOP: the lock file is a symlink
            self.lock = None
            self.error = f"cannot open the stage lock in {root}: {e.strerror or e}"
        if self.lock is None and wanted and self.error is None:
            self.error = f"another transfer is writing into {root} (an interrupted run still going?)"
        self.cache = load_cache(cache_path)

    def opener(self):
        return self.write, self.close

    def write(self, chunk):
        self.bytes += len(chunk)
        view = memoryview(chunk)
        while len(view):
            if self.cur is None:
                self.buf += bytes(view)
                view = view[len(view):]
                at = self.buf.find(b"\n")
                if at < 0:
                    if len(self.buf) > 65536:
                        raise ValueError("not a stream of model files")
                    break
                header, rest = self.buf[:at], self.buf[at + 1:]
                self.buf = b""
                self.start(json.loads(header))
                view = memoryview(rest)
                if self.cur["left"] == 0:
                    self.finish()
                continue
            take = view[:self.cur["left"]]
            view = view[len(take):]
            if self.cur["f"] is not None:
                self.cur["f"].write(take)
                self.cur["h"].update(take)
                self.files[self.cur["name"]]["received"] += len(take)
            self.cur["left"] -= len(take)
            if self.cur["left"] == 0:
                self.finish()

    def start(self, meta):
        name, size, offset = meta["name"], meta["size"], meta["offset"]
        self.cur = {"name": name, "left": size - offset, "f": None, "h": None}
        want = self.wanted.get(name)
        if want is None or self.lock is None:
            return
        res = self.files[name]
        if want[1] != size:
            res.update(state="failed", error="the stream's size %d is not the manifest's %d" % (size, want[1]))
            return
        part = partial_path(self.root, name)
        why = escape(self.root, name)
        if why is None:
            os.makedirs(os.path.dirname(part), exist_ok=True)
            why = None if within(os.path.dirname(part), self.root) else f"{os.path.dirname(part)} leads outside {self.root}"
        if why:
            res.update(state="failed", error="refused: " + why)
            return
        try:  # never through a symlink put in the partial file's place
            f = os.fdopen(open_nofollow(part, os.O_RDWR | os.O_CREAT), "r+b", buffering=0)
        except OSError as e:
            res.update(state="failed", error=f"cannot open {part}: {e.strerror or e}")
            return
        have = os.fstat(f.fileno()).st_size
        if have < offset:
            f.close()
            res.update(state="failed", error="partial file has %d bytes, the stream starts at %d" % (have, offset))
            return
        f.truncate(offset)
        self.cur["h"] = sha_of(f, offset) if offset else hashlib.sha256()
        f.seek(offset)
        self.cur["f"] = f
        res.update(state="receiving", resumed_from=offset)

    def finish(self):
        cur, self.cur = self.cur, None
        f = cur["f"]
        if f is None:
            return
        name, res = cur["name"], self.files[cur["name"]]
        os.fsync(f.fileno())
        f.close()
        part, path = partial_path(self.root, name), os.path.join(self.root, name)
        sha = self.wanted[name][0]
        got = cur["h"].hexdigest()
        if got != sha:
            os.unlink(part)
            res.update(state="failed", error=f"sha256 {got[:16]} differs from the manifest's {sha[:16]}")
            return
        os.replace(part, path)
        self.cache[path] = stamp(path) + [sha]
        res["state"] = "ok"

    def close(self, failed=False):
        if self.cur is not None and self.cur["f"] is not None:
            self.cur["f"].close()  # the partial file keeps what came: the next run resumes
            res = self.files[self.cur["name"]]
            res.update(state="incomplete", error="the stream ended with %d bytes to go" % self.cur["left"])
        if self.lock is not None:
            save_cache(self.cache_path, self.cache)
            os.close(self.lock)
        return {"files": self.files, "bytes": self.bytes, "error": self.error}


class Progress:
    """The bytes this hop has read, noted in a file of its own (`progress` in the settings)
    at most twice a second for the control machine to read; the file is made new (never
    through a symlink, never one already there), private, and removed at the end."""

    def __init__(self, path):
        self.fd, self.noted, self.path = None, 0.0, path
        if path:
            try:
                self.fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError:
                self.fd = None  # no progress shown; the transfer itself goes on

    def note(self, count, now=None):
        now = time.monotonic() if now is None else now
        if self.fd is not None and now - self.noted >= 0.5:
            self.noted = now
            text = json.dumps({"bytes": count}).encode()
            os.pwrite(self.fd, text, 0)
            os.ftruncate(self.fd, len(text))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            os.unlink(self.path)


def file_stream(root, plan, bytes_per_s=0):
    """The stream of model files: per [name, size, offset] a header line and its bytes,
    throttled to bytes_per_s (0: as fast as it goes) in steps of a tenth of a second."""
    started, sent = time.monotonic(), 0
    step = max(4096, min(CHUNK, int(bytes_per_s / 10))) if bytes_per_s > 0 else CHUNK
    for name, size, offset in plan:
        why = escape(root, name)
        if why:
            raise ValueError("refused: " + why)
        yield (json.dumps({"name": name, "size": size, "offset": offset}) + "\n").encode()
        with open(os.path.join(root, name), "rb") as f:
            f.seek(offset)
            left = size - offset
            while left > 0:
                chunk = f.read(min(step, left))
                if not chunk:
                    raise ValueError("%s: %d bytes short (changed while sent?)" % (name, left))
                left -= len(chunk)
                sent += len(chunk)
                yield chunk
                if bytes_per_s > 0:
                    ahead = sent / bytes_per_s - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)


def reader(source, token, report, stall):
    """(read(n) -> bytes, cleanup) for the configured source."""
    kind = source[0]
    if kind == "save":
        saver = subprocess.Popen(["docker", "save", source[1]], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)

        def done():
            err = saver.stderr.read().decode(errors="replace").strip()
            report["save"] = {"rc": saver.wait(), "error": err[-300:]}
            return report["save"]["rc"] == 0
        return saver.stdout.read, done
    if kind == "files":
        chunks = file_stream(source[1], source[2], float(source[3] or 0))
        return (lambda n: next(chunks, b"")), (lambda: True)
    if kind == "recv":
        conn = listen(source[1], source[2], token, 1, stall=stall)[0]

        def closed():
            conn.close()
            return True
        return conn.recv, closed
    return sys.stdin.buffer.read, (lambda: True)


def main():
    token = sys.stdin.buffer.readline().strip().decode()  # never in argv: `ps` shows argv
    settings = json.loads(sys.stdin.buffer.readline())
    source, sink, nxt = settings["from"], settings["sink"], settings.get("next")
    stall = float(settings.get("stall") or STALL)
    report = {"bytes": 0}
    outs = {}
    if sink[0] == "load":
        outs["sink"] = Out(docker_load)
    elif sink[0] == "files":
        outs["sink"] = Out(FileSink(sink[1], sink[2], sink[3]).opener)
    if nxt:
        outs["forward"] = Out(forward(nxt[0], nxt[1], token, stall))
    for out in outs.values():
        out.start()
    source_ok, done = False, None
    progress = Progress(settings.get("progress"))
    try:
        read, done = reader(source, token, report, stall)
        while True:
            chunk = read(CHUNK)
            if not chunk:
                break
            report["bytes"] += len(chunk)
            progress.note(report["bytes"])
            for out in outs.values():
                out.put(chunk)
    except Exception as e:
        report["read_error"] = f"{type(e).__name__}: {e}"
    finally:
        progress.close()
    for out in outs.values():
        out.put(None)
    for name, out in outs.items():
        out.join()
        report[name] = {"error": out.error, "result": out.result}
    if done is not None:
        source_ok = done()
    ok = "read_error" not in report and source_ok
    result = (report.get("sink") or {}).get("result") or {}
    if sink[0] == "load":
        ok = ok and report["sink"]["error"] is None and result.get("rc") == 0
    elif sink[0] == "files":
        ok = ok and report["sink"]["error"] is None and not result.get("error") and all(
            f["state"] == "ok" for f in result.get("files", {}).values())
    if source[0] in ("save", "files"):
        ok = ok and (report.get("forward") or {}).get("error") is None
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
