"""What the modules that write files share: the write itself, modes, owners, removal,
unit-file paths, and the parameters of a written file (`WRITTEN`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

from sparkrack.facts.files import FileFacts, file_query
from sparkrack.provision.changes import Action, Change, Put, Run
from sparkrack.provision.diffs import file_diff, line_counts
from sparkrack.provision.modules.base import Module, PlanState, Step
from sparkrack.provision.modules.params import Param

OWNERSHIP = {
    "owner": Param("str", "its owner", "root", default="root"),
    "group": Param("str", "its group", "root", default="root"),
}
WRITTEN = {  # the parameters template and copy share, beside their content's and dest
    "dest": Param("str", "the path of the file to write, on the node",
                  "/etc/sparkrack/example.conf", required=True),
    "mode": Param("mode", "its mode", "0644", default="0644"),
    **OWNERSHIP,
    "secret_keys": Param("list", "the KEY=VALUE lines whose values its diff shows as `***`",
                         ["HF_TOKEN"]),
}
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")


def octal(mode: str) -> int:
    """A file mode as a task gives it or stat prints it ("0644", "644") -> int."""
    return int(mode, 8)


def is_unit_file(path: str) -> bool:
    """Whether path is a systemd unit file or drop-in (a change needs daemon-reload)."""
    return any(path.startswith(directory + "/") for directory in UNIT_DIRS)


def fix_attributes(current: FileFacts, path: str, mode: int, owner: str, group: str,
                   actions: list[Action], what: list[str]) -> None:
    """Append the chmod/chown an existing path needs to have mode and owner:group."""
    if octal(current.mode or "0") != mode:
        actions.append(Run(("chmod", f"{mode:04o}", "--", path)))
        what.append(f"mode {octal(current.mode or '0'):04o} -> {mode:04o}")
    if (current.owner, current.group) != (owner, group):
        actions.append(Run(("chown", f"{owner}:{group}", "--", path)))
        what.append(f"owner {current.owner}:{current.group} -> {owner}:{group}")


def remove_file(base: Change, path: str, current: FileFacts, state: PlanState) -> Change:
    """The Change that removes the file at path (absent mode); a directory is refused."""
    if not current.exists:
        return replace(base, summary=f"{path} absent")
    if current.type == "directory":
        return replace(base, status="failed", summary=f"{path} is a directory, not removed")
    state.removed.add(path)
    if is_unit_file(path):
        state.reload_pending = True
    return replace(base, status="changed", summary=f"{path}: remove",
                   actions=(Run(("rm", "-f", "--", path)),))


def write_content(step: Step, dest: str, content: bytes) -> Change:
    """The write (or chmod/chown) that makes dest hold content with the task's mode, owner
    and group. Writes only when the content differs (else fixes mode and owner in place);
    a changed unit file or drop-in makes systemd's daemon-reload pending. The diff masks
    `secret_keys`' values."""
    base, p, state = step.base, step.params, step.state
    current = step.facts.file(dest)
    if current.type == "directory":
        return replace(base, status="failed", summary=f"{dest} is a directory")
    mode = octal(p["mode"])
    owner, group = str(p["owner"]), str(p["group"])
    same_content = current.type == "file" and current.sha256 == hashlib.sha256(content).hexdigest()
    actions: list[Action] = []
    what: list[str] = []
    if not same_content:
        actions.append(Put(dest, content, mode))
        if (owner, group) != (state.user, state.user):
            actions.append(Run(("chown", f"{owner}:{group}", "--", dest)))
        if not current.exists:
            what.append(f"create ({mode:04o})")
        else:
            added, removed = line_counts(current.content, content)
            what.append(f"update (+{added} -{removed})" if current.content is not None
                        else "update")
    else:
        fix_attributes(current, dest, mode, owner, group, actions, what)
    if not actions:
        return replace(base, summary=dest)
    if is_unit_file(dest) and not same_content:
        state.reload_pending = True
    diff = "" if same_content else file_diff(
        dest, current.content if current.exists else b"", content, p.get("secret_keys") or (),
        known=current.content is not None or not current.exists)
    return replace(base, status="changed", summary=f"{dest}: {', '.join(what)}", diff=diff,
                   actions=tuple(actions))


def file_writer(name: str, params: dict[str, Param], content: Callable[[Step], bytes]
                ) -> Module:
    """A module that makes `dest` hold content(step), with mode, owner and group (params:
    its own, beside WRITTEN's); absent mode removes the file."""
    def plan(step: Step) -> Change:
        dest = str(step.params["dest"])
        if step.state.absent:
            return remove_file(step.base, dest, step.facts.file(dest), step.state)
        return write_content(step, dest, content(step))

    return Module(name=name, params={**params, **WRITTEN},
                  queries=lambda p: [file_query(str(p["dest"]))], plan=plan)
