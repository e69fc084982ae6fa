"""file: a directory (the default state), an existing file's mode and owner, or a path
absent.

A path an earlier task of the plan already made so is not planned twice. Absent mode
removes a file, and a directory only when nothing but what this run removes is in it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath

from sparkrack.facts.files import file_query
from sparkrack.provision.changes import Action, Change, Run
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.fileops import (
    OWNERSHIP,
    fix_attributes,
    octal,
    remove_file,
)
from sparkrack.provision.modules.params import Param

PARAMS = {
    "path": Param("str", "the path on the node", "/etc/sparkrack", required=True),
    "state": Param("str", "a directory (made), a file (it must exist: its mode and owner "
                   "are set) or absent (removed)", "directory", default="directory",
                   choices=("directory", "file", "absent")),
    "mode": Param("mode", "its mode (default: 0755 for a directory, 0644 for a file)",
                  "0755"),
    **OWNERSHIP,
}


def plan(step: Step) -> Change:
    """The mkdir/chmod/chown/rm/rmdir that makes path what the task says."""
    base, p, state = step.base, step.params, step.state
    path = str(p["path"])
    wanted = str(p["state"])
    current = step.facts.file(path)
    if wanted == "absent" or (state.absent and wanted == "file"):
        return remove_file(base, path, current, state)
    if state.absent:  # a directory: removed only when nothing but what this run removes is in it
        if not current.exists:
            return replace(base, summary=f"{path} absent")
        others = [e for e in current.entries if str(PurePosixPath(path) / e) not in state.removed]
        if others:
            return replace(base, summary=f"{path} kept (holds {len(others)} other entries)")
        state.removed.add(path)
        return replace(base, status="changed", summary=f"{path}: remove (empty)",
                       actions=(Run(("rmdir", "--", path)),))
    mode = octal(p.get("mode", "0755" if wanted == "directory" else "0644"))
    owner, group = str(p["owner"]), str(p["group"])
    actions: list[Action] = []
    what: list[str] = []
    if state.planned.get(path) == (wanted, mode, owner, group):
        return replace(base, summary=f"{path} (made so by an earlier task)")
    state.planned[path] = (wanted, mode, owner, group)
    if not current.exists:
        if wanted == "file":
            return replace(base, status="failed", summary=f"{path} does not exist")
        actions.append(Run(("mkdir", "-p", "-m", f"{mode:04o}", "--", path)))
        what.append(f"create directory ({mode:04o})")
        if (owner, group) != (state.user, state.user):
            actions.append(Run(("chown", f"{owner}:{group}", "--", path)))
    else:
        if current.type != wanted:
            return replace(base, status="failed",
                           summary=f"{path} is a {current.type or 'thing'}, not a {wanted}")
        fix_attributes(current, path, mode, owner, group, actions, what)
    if not actions:
        return replace(base, summary=path)
    return replace(base, status="changed", summary=f"{path}: {', '.join(what)}",
                   actions=tuple(actions))


MODULE = Module(
    name="file",
    params=PARAMS,
    queries=lambda p: [file_query(str(p["path"]))],
    plan=plan,
)
