"""The compile cache folders on a node (stdlib only; sent as `python3 -c`).

    caches make ROOT NAME KEY-JSON     ROOT/NAME made (root's, mode 0700), KEY-JSON written
                                       to its sparkrack-cache.json if it has none; prints
                                       {"made": bool, "empty": bool, "bytes": N, "files": N}
    caches list ROOT                   [{name, key, bytes, files, mtime}] of its folders
    caches remove ROOT CHECK NAME...   each ROOT/NAME that holds a sparkrack-cache.json,
                                       whole (CHECK 1: only said); prints {name: {bytes,
                                       error}}

A name is one path component of the folders `make` makes ([a-z0-9_-]); a link or anything
without the key file is never removed. Links inside a folder are not followed.
"""

import json
import os
import re
import shutil
import sys

KEY_FILE = "sparkrack-cache.json"
NAME = re.compile(r"^[a-z0-9_][a-z0-9_-]*$")


def usage(root, name):
    """(bytes, files) under root/name, links not followed."""
    total, files = 0, 0
    for top, _dirs, names in os.walk(os.path.join(root, name)):
        for each in names:
            try:
                total += os.lstat(os.path.join(top, each)).st_size
                files += 1
            except OSError:
                pass
    return total, files


def make(root, name, key):
    if not NAME.match(name):
        print(json.dumps({"error": f"not a cache folder name: {name!r}"}))
        return 2
    os.makedirs(root, mode=0o755, exist_ok=True)
    folder = os.path.join(root, name)
    new = not os.path.isdir(folder)
    if new:
        os.mkdir(folder, 0o700)
    os.chmod(folder, 0o700)
    path = os.path.join(folder, KEY_FILE)
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(key)
        os.replace(path + ".tmp", path)
    total, files = usage(root, name)
    print(json.dumps({"made": new, "empty": files <= 1, "bytes": total, "files": files}))
    return 0


def listing(root):
    out = []
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for name in names:
        folder = os.path.join(root, name)
        if not NAME.match(name) or os.path.islink(folder) or not os.path.isdir(folder):
            continue
        try:
            with open(os.path.join(folder, KEY_FILE)) as f:
                key = json.load(f)
        except (OSError, ValueError):
            key = None
        total, files = usage(root, name)
        out.append({"name": name, "key": key if isinstance(key, dict) else None,
                    "bytes": total, "files": files, "mtime": os.stat(folder).st_mtime})
    print(json.dumps(out))
    return 0


def remove(root, check, *names):
    out = {}
    for name in names:
        folder = os.path.join(root, name)
        if not NAME.match(name) or os.path.islink(folder):
            out[name] = {"bytes": 0, "error": "not a cache folder name"}
        elif not os.path.isdir(folder):
            out[name] = {"bytes": 0, "error": None, "absent": True}
        elif not os.path.isfile(os.path.join(folder, KEY_FILE)):
            out[name] = {"bytes": 0, "error": f"{folder} holds no {KEY_FILE}: not a sparkrack cache folder"}
        else:
            out[name] = {"bytes": usage(root, name)[0], "error": None}
            if check == "0":
                shutil.rmtree(folder)
    print(json.dumps(out))
    return 1 if any(v["error"] for v in out.values()) else 0


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    sys.exit({"make": make, "list": listing, "remove": remove}[mode](*args))
