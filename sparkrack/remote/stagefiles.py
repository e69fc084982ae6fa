"""A model directory on a node as staging sees it (stdlib only): partial files renamed into
place when their SHA-256 matches, the hash cache, the stage lock, and never a name that
leads outside the directory (docs/internals.md#model-directories-on-a-node).
"""

import fcntl
import hashlib
import json
import os

CHUNK = 1 << 20
LOCK = ".sparkrack-stage.lock"
PARTIAL = ".sparkrack-partial"
MANIFEST = "sparkrack-manifest.sha256"


def within(path, top):
    """Whether path, every link resolved, is top or lies under it (top resolved too)."""
    real, top = os.path.realpath(path), os.path.realpath(top)
    return real == top or real.startswith(top.rstrip("/") + "/")


def blob_store(root):
    """The Hugging Face blob store a snapshot directory's links point into
    (REPO/snapshots/REV -> REPO/blobs), or None when root is not such a snapshot."""
    parent = os.path.dirname(os.path.abspath(root).rstrip("/"))
    if os.path.basename(parent) != "snapshots":
        return None
    return os.path.join(os.path.dirname(parent), "blobs")


def escape(root, name):
    """Why name (a path relative to root) must not be touched: absolute, has `..`, or
    resolves (through a link) outside root, or outside root's blob store for a Hugging
    Face snapshot; None when it stays inside."""
    if not name or os.path.isabs(name) or ".." in name.split("/"):
        return f"{name!r} is not a path inside {root}"
    path = os.path.join(root, name)
    store = blob_store(root)
    if within(path, root) or (store is not None and os.path.islink(path)
                              and within(os.path.dirname(path), root) and within(path, store)):
        return None
    return f"{path} leads outside {root} (to {os.path.realpath(path)})"


def open_nofollow(path, flags, mode=0o644):
    """os.open with O_NOFOLLOW: a symlink in path's last place fails (ELOOP), never written
    through."""
    return os.open(path, flags | os.O_NOFOLLOW, mode)


def partial_path(root, name):
    head, tail = os.path.split(os.path.join(root, name))
    return os.path.join(head, "." + tail + PARTIAL)


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
    """The SHA-256 object of a file's first limit bytes (all without limit); path may be an
    open binary file (read from its start)."""
    if not isinstance(path, str):
        path.seek(0)
        return _digest(path, limit)
    with open(path, "rb", buffering=0) as f:
        return _digest(f, limit)


def _digest(f, limit):
    h, left = hashlib.sha256(), limit
    while left is None or left > 0:
        chunk = f.read(CHUNK if left is None else min(CHUNK, left))
        if not chunk:
            break
        h.update(chunk)
        if left is not None:
            left -= len(chunk)
    return h


def locked(root):
    """An fd holding the exclusive lock on root's staging (None: another transfer has it).
    OSError (ELOOP) when the lock file is a symlink: never opened through one."""
    os.makedirs(root, exist_ok=True)
    fd = open_nofollow(os.path.join(root, LOCK), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def busy(root):
    """Whether a transfer holds root's lock (checked without creating anything); a lock
    file that is a symlink counts as held (nobody may write there)."""
    path = os.path.join(root, LOCK)
    if not os.path.lexists(path):
        return False
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def walk_files(root):
    """Every file under root (relative paths, sorted; a symlink to a file, as in a Hugging
    Face snapshot, counts as that file), leaving out hidden folders, the manifest and
    staging's own files. ValueError naming a symlink that leads outside root (or outside a
    snapshot's own blob store, see escape): its file is never read."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name == LOCK or name.endswith(PARTIAL) or (name.startswith(".") and name.endswith(".tmp")):
                continue
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if rel != MANIFEST and os.path.isfile(path):  # a symlink counts as its file's bytes
                why = escape(root, rel)
                if why:
                    raise ValueError(why)
                found.append(rel)
    return sorted(found)


def parse_manifest_text(text):
    """[(name, sha256)] of a manifest's lines (None for a line that is not one)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        sha, sep, name = line.partition(" ")
        name = name[1:] if name[:1] in (" ", "*") else name
        if len(sha) != 64 or not sep or not name:
            return None
        out.append((name, sha.lower()))
    return out
