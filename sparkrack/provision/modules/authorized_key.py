"""authorized_key: one line of an authorized_keys file, found by its marker.

The line is `[options] key marker` (the marker: the one-word comment that ends it); any
other line with that marker is replaced. An empty key changes nothing (no key to
authorize). Absent mode removes every marked line, and the file if nothing else was in it.
"""

from __future__ import annotations

from dataclasses import replace

from sparkrack.facts.files import file_query
from sparkrack.provision.changes import Change, Put, Run
from sparkrack.provision.diffs import file_diff
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.fileops import octal
from sparkrack.provision.modules.params import Param

PARAMS = {
    "path": Param("str", "the authorized_keys file (relative: to the user's home)",
                  ".ssh/authorized_keys", required=True),
    "key": Param("str", "the public key (an empty one changes nothing)",
                 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample", required=True),
    "marker": Param("str", "the one word that ends the line: the line is found by it",
                    "sparkrack-watchdog", required=True),
    "options": Param("str", "the line's options, before the key", "restrict"),
}


def marked(line: str, marker: str) -> bool:
    """Whether an authorized_keys line is the one a task manages: a key line (not a
    comment) whose last word is the marker."""
    words = line.split()
    return bool(words) and not words[0].startswith("#") and words[-1] == marker


def plan(step: Step) -> Change:
    """The write of the file with the marked line as the task says (or without it)."""
    base, p, state = step.base, step.params, step.state
    path, marker = str(p["path"]), str(p["marker"])
    key, options = str(p.get("key") or "").strip(), str(p.get("options") or "").strip()
    if not marker or len(marker.split()) != 1:
        return replace(base, status="failed", summary=f"marker {marker!r}: one word")
    if any(c in key + options for c in "\n\r\0"):
        return replace(base, status="failed", summary="key or options hold a line break")
    if not key and not state.absent:
        return replace(base, status="skipped", summary=f"skipped: no key to authorize in {path}")
    current = step.facts.file(path)
    if current.exists and current.type != "file":
        return replace(base, status="failed", summary=f"{path} is a {current.type}, not a file")
    if current.exists and current.content is None:
        return replace(base, status="failed",
                       summary=f"{path} is too large to edit here ({current.size} bytes)")
    old = current.content or b""
    lines = old.decode(errors="surrogateescape").splitlines()
    kept = [line for line in lines if not marked(line, marker)]
    if state.absent:
        if kept == lines:
            return replace(base, summary=f"no {marker} key in {path}")
        if not any(line.strip() for line in kept):
            state.removed.add(path)
            return replace(base, status="changed", summary=f"{path}: remove (held only the "
                           f"{marker} key)", actions=(Run(("rm", "-f", "--", path)),))
        wanted = kept
        what = f"remove the {marker} key"
    else:
        line = f"{options} {key} {marker}" if options else f"{key} {marker}"
        wanted = [*kept, line]
        if wanted == lines:
            return replace(base, summary=f"{path}: {marker} key present")
        what = "add the" if kept == lines else "replace the"
        what = f"{what} {marker} key" if current.exists else f"create (0600) with the {marker} key"
    content = "".join(f"{line}\n" for line in wanted).encode(errors="surrogateescape")
    mode = octal(current.mode) if current.exists and current.mode else 0o600
    return replace(base, status="changed", summary=f"{path}: {what}",
                   diff=file_diff(path, old if current.exists else b"", content, (), known=True),
                   actions=(Put(path, content, mode),))


MODULE = Module(
    name="authorized_key",
    params=PARAMS,
    queries=lambda p: [file_query(str(p["path"]))],
    plan=plan,
)
