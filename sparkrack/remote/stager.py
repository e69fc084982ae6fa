"""Questions about a model directory on a node, and its removal (stdlib only): `stager sizes
| check | manifest | verify | list | remove` (docs/internals.md#model-directories-on-a-node).
"""

import hashlib
import json
import os
import sys

from .stagefiles import (
    LOCK,
    MANIFEST,
    PARTIAL,
    busy,
    escape,
    load_cache,
    open_nofollow,
    parse_manifest_text,
    partial_path,
    save_cache,
    sha_of,
    stamp,
    walk_files,
    within,
)


def sizes(root):
    out = {}
    for name in json.load(sys.stdin):
        path = os.path.join(root, name)
        inside = os.path.isfile(path) and not escape(root, name)
        out[name] = os.path.getsize(path) if inside else None
    print(json.dumps(out))
    return 0


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


def manifest(root, cache_path, write):
    if not os.path.isdir(root):
        print(json.dumps({"error": f"{root} is not a directory"}))
        return 1
    try:
        names = walk_files(root)
    except ValueError as error:
        print(json.dumps({"error": f"refused: {error} (a model file must be inside the model "
                                   "directory)"}))
        return 1
    if not names:
        print(json.dumps({"error": f"{root} holds no file"}))
        return 1
    found = {n: os.path.getsize(os.path.join(root, n)) for n in names}
    path = os.path.join(root, MANIFEST)
    text, made, hashed = None, False, 0
    if os.path.isfile(path):
        with open(path) as f:
            old = f.read()
        entries = parse_manifest_text(old)
        newest = max(os.stat(os.path.join(root, n)).st_mtime_ns for n in names)
        if entries and sorted(n for n, _ in entries) == names and newest <= os.stat(path).st_mtime_ns:
            text = old
    if text is None:
        cache, lines = load_cache(cache_path), []
        for name in names:
            full = os.path.join(root, name)
            st, known = stamp(full), cache.get(full)
            if known and known[:3] == st:
                sha = known[3]
            else:
                sha = sha_of(full).hexdigest()
                hashed += st[0]
                cache[full] = st + [sha]
            lines.append(f"{sha}  {name}\n")
        text, made = "".join(lines), True
        save_cache(cache_path, cache)
        if write == "1":
            tmp = os.path.join(root, "." + MANIFEST + ".tmp")
            with os.fdopen(open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    print(json.dumps({"text": text, "sizes": found, "made": made, "hashed_bytes": hashed,
                      "written": made and write == "1"}))
    return 0


def verify(root, full):
    path = os.path.join(root, MANIFEST)
    out = {"digest": None, "sizes": {}, "bad": {}, "busy": busy(root), "partials": 0,
           "exists": os.path.isdir(root)}
    if out["exists"]:
        out["partials"] = sum(1 for top, _, files in os.walk(root) for n in files
                              if n.endswith(PARTIAL))
    if os.path.isfile(path):
        with open(path, "rb") as f:
            data = f.read()
        out["digest"] = hashlib.sha256(data).hexdigest()
        entries = parse_manifest_text(data.decode(errors="replace"))
        if entries is None:
            out["bad"][MANIFEST] = "not a sha256sum manifest"
            entries = []
        for name, sha in entries:
            file = os.path.join(root, name)
            if escape(root, name):
                out["sizes"][name], out["bad"][name] = None, escape(root, name)
                continue
            out["sizes"][name] = os.path.getsize(file) if os.path.isfile(file) else None
            if full == "1" and out["sizes"][name] is not None and sha_of(file).hexdigest() != sha:
                out["bad"][name] = "sha256 differs from the manifest"
    print(json.dumps(out))
    return 0


def listing(*parents):
    out = []
    for parent in parents:
        if not os.path.isdir(parent):
            continue
        for name in sorted(os.listdir(parent)):
            root = os.path.join(parent, name)
            if name.startswith(".") or not os.path.isdir(root) or os.path.islink(root):
                continue
            path = os.path.join(root, MANIFEST)
            entry = {"path": root, "digest": None, "files": 0, "bytes": 0, "partials": 0,
                     "busy": busy(root)}
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    data = f.read()
                entry["digest"] = hashlib.sha256(data).hexdigest()
                for rel, _ in parse_manifest_text(data.decode(errors="replace")) or []:
                    file = os.path.join(root, rel)
                    if os.path.isfile(file):
                        entry["files"] += 1
                        entry["bytes"] += os.path.getsize(file)
            for _top, _, files in os.walk(root):
                entry["partials"] += sum(1 for n in files if n.endswith(PARTIAL))
            if entry["digest"] or entry["partials"] or os.path.exists(os.path.join(root, LOCK)):
                out.append(entry)
    print(json.dumps(out))
    return 0


def remove(root, check, cache_path):
    out = {"removed": [], "bytes": 0, "left": [], "error": None}
    path = os.path.join(root, MANIFEST)
    if not os.path.isdir(root):
        print(json.dumps(out))
        return 0
    if busy(root):
        out["error"] = f"a transfer is writing into {root}"
        print(json.dumps(out))
        return 1
    names = []
    if os.path.isfile(path):
        with open(path) as f:
            names = [n for n, _ in parse_manifest_text(f.read()) or []]
    for name in names:  # a name leaving root: nothing is removed (never unlinked there)
        why = escape(root, name)
        if why:
            out["error"] = (f"{path} names a file outside the model directory: {why}; nothing removed "
                            "(fix or delete the manifest)")
            print(json.dumps(out))
            return 1
    doomed = [os.path.join(root, n) for n in names] + [partial_path(root, n) for n in names]
    for top, _, files in os.walk(root):
        doomed += [os.path.join(top, n) for n in files if n.endswith(PARTIAL)]
    doomed += [os.path.join(root, LOCK), path]
    if not os.path.exists(path) and not any(p.endswith(PARTIAL) for p in doomed if os.path.exists(p)):
        out["error"] = f"{root} holds no {MANIFEST} and no partial file: not a staged model"
        print(json.dumps(out))
        return 1
    for file in dict.fromkeys(doomed):
        if os.path.isfile(file) and not os.path.islink(file) and within(file, root):
            out["bytes"] += os.path.getsize(file)
            out["removed"].append(os.path.relpath(file, root))
            if check == "0":
                os.unlink(file)
    if check == "0":
        for top, _dirs, _files in sorted(os.walk(root, topdown=False), key=lambda t: -len(t[0])):
            try:
                os.rmdir(top)
            except OSError:
                pass
        cache = load_cache(cache_path)
        kept = {k: v for k, v in cache.items() if not k.startswith(root.rstrip("/") + "/")}
        if len(kept) != len(cache):
            save_cache(cache_path, kept)
    if os.path.isdir(root):
        out["left"] = [os.path.relpath(os.path.join(t, n), root) for t, _, fs in os.walk(root)
                       for n in fs if os.path.relpath(os.path.join(t, n), root) not in out["removed"]][:20]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    sys.exit({"sizes": sizes, "check": check, "manifest": manifest, "verify": verify,
              "list": listing, "remove": remove}[mode](*args))
