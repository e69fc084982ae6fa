"""template: a file rendered from the role's templates/ (Jinja2), with mode and owner.

Writes only when the content differs (else fixes mode and owner in place); a changed unit
file or drop-in makes systemd's daemon-reload pending. The diff masks `secret_keys`'
values. Absent mode removes the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from sparkrack.provision.changes import Action, Change, Put, Run
from sparkrack.provision.diffs import file_diff, line_counts
from sparkrack.facts.files import file_query
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.files import fix_attributes, is_unit_file, octal, remove_file


def plan(step: Step) -> Change:
    """The write (or chmod/chown) that makes dest the rendered template."""
    base, p, state = step.base, step.params, step.state
    dest = str(p["dest"])
    current = step.facts.file(dest)
    if state.absent:
        return remove_file(base, dest, current, state)
    if current.type == "directory":
        return replace(base, status="failed", summary=f"{dest} is a directory")
    text = step.renderer.template(step.role, str(p["src"]), step.context)
    content = text.encode()
    mode = octal(p.get("mode", "0644"))
    owner, group = str(p.get("owner", "root")), str(p.get("group", "root"))
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


MODULE = Module(
    name="template",
    required=frozenset({"src", "dest"}),
    optional=frozenset({"mode", "owner", "group", "secret_keys"}),
    queries=lambda p: [file_query(str(p["dest"]))],
    plan=plan,
)
