"""Plans as data: a node's rendered tasks and its facts in, the changes out.

Pure: nothing here talks to a node. `queries` says what to gather for a task list;
`plan_node` turns tasks + facts into one `Change` per task (ok, changed, failed, skipped
or pending) carrying the actions that would make it so: `Put` a file (atomic), `Run` an
argv, `Transfer` an image. An empty action list everywhere means "no change".

Semantics worth knowing:
- systemd: `daemon-reload` is planned once, only after a unit file or drop-in changed (or
  systemd says it needs one), before the next systemd action or, at the latest, before
  the handlers.
- handlers run once per node, after every task, in role and definition order, only when a
  task that notified them changed; a `restarted` handler skips a unit this run started.
- assert: checked against the facts; after an earlier change in the same role it is
  "pending" and checked by the re-plan that follows the apply.
- a failed task skips the rest of its role on that node; other roles go on.
- absent mode (unprovision) walks each role backwards and removes what it would write.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from sparkrack.facts.provision import (
    IMAGES,
    NETDEVS,
    NodeFacts,
    file_query,
    guard_query,
    normalize_ref,
    roce_query,
    unit_query,
)
from sparkrack.facts.queries import Query
from sparkrack.provision.roles import Renderer, RenderError, Role, Task

Status = Literal["ok", "changed", "failed", "skipped", "pending"]
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")
REDACTED = "***"


@dataclass(frozen=True)
class Put:
    """Write content to path with mode (beside it, then renamed over it)."""

    path: str
    content: bytes = field(repr=False)
    mode: int

    def describe(self) -> str:
        return f"write {self.path} ({self.mode:04o})"


@dataclass(frozen=True)
class Run:
    """Run one argv on the node."""

    argv: tuple[str, ...]

    def describe(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class Transfer:
    """Bring image ref with image_id onto the node (without a registry)."""

    ref: str
    image_id: str
    source: str  # "tar:PATH" or "node:NAME"

    def describe(self) -> str:
        return f"load {self.ref} ({short_id(self.image_id)}) from {self.source}"


Action = Put | Run | Transfer


@dataclass(frozen=True)
class Change:
    """One task's outcome on one node: what it found, what it would do."""

    role: str
    task: str
    module: str
    status: Status
    summary: str = ""
    diff: str = ""
    actions: tuple[Action, ...] = ()
    handler: bool = False

    @property
    def changed(self) -> bool:
        return self.status == "changed"


@dataclass(frozen=True)
class ImageTarget:
    """Where the one right image for a ref comes from (resolved for the whole rack)."""

    ref: str
    image_id: str | None
    source: str = ""  # "tar:PATH" | "node:NAME"
    error: str | None = None


def short_id(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]


def octal(mode: Any) -> int:
    """A file mode given as "0644", "644", 0o644 or 420 -> int."""
    if isinstance(mode, int):
        return mode
    return int(str(mode), 8)


def is_unit_file(path: str) -> bool:
    """Whether path is a systemd unit file or drop-in (a change needs daemon-reload)."""
    return any(path.startswith(directory + "/") for directory in UNIT_DIRS)


# --- What to gather ------------------------------------------------------------------------


def queries(tasks: Sequence[Task]) -> list[Query]:
    """Every fact the tasks need, for the one gather round trip."""
    found: list[Query] = []
    for task in tasks:
        if task.error:
            continue
        p = task.params
        if task.module == "template":
            found.append(file_query(str(p["dest"])))
        elif task.module == "file":
            found.append(file_query(str(p["path"])))
        elif task.module == "systemd":
            found.append(unit_query(str(p["name"])))
        elif task.module == "command":
            if p.get("creates"):
                found.append(file_query(str(p["creates"])))
            if p.get("unless"):
                found.append(guard_query([str(a) for a in p["unless"]]))
        elif task.module == "docker_image":
            found.append(IMAGES)
        elif task.module == "authorized_key":
            found.append(file_query(str(p["path"])))
        elif task.module == "assert":
            gather = p.get("gather") or {}
            hcas = gather.get("roce") or []
            for hca in [hcas] if isinstance(hcas, str) else hcas:
                found.append(roce_query(str(hca)))
            for path in gather.get("paths") or []:
                found.append(file_query(str(path)))
            if gather.get("netdevs"):
                found.append(NETDEVS)
            if gather.get("images"):
                found.append(IMAGES)
    return list(dict.fromkeys(found))


# --- Planning ------------------------------------------------------------------------------


@dataclass
class _NodeState:
    """What earlier tasks of this plan did, for the later ones."""

    user: str
    absent: bool
    reload_pending: bool = False
    reloaded: bool = False
    started: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    role_changed: bool = False
    secrets: tuple[str, ...] = ()
    planned: dict[str, tuple[str, int, str, str]] = field(default_factory=dict)
    # path -> (type, mode, owner, group) as earlier tasks of this plan leave it


def plan_node(roles: Sequence[Role], tasks: Mapping[str, Sequence[Task]],
              handlers: Mapping[str, Sequence[Task]], context: Mapping[str, Any],
              facts: NodeFacts, *, renderer: Renderer, absent: bool = False,
              images: Mapping[str, ImageTarget] | None = None, user: str = "root",
              secrets: Sequence[str] = ()) -> list[Change]:
    """One Change per task of roles (by role, in order), then the handlers that run.

    context is the node's vars; `facts` is added for expressions and templates. images
    maps normalized refs to the rack-wide ImageTarget (docker_image). secrets are values
    to blank out of every summary and diff.
    """
    state = _NodeState(user=user, absent=absent, secrets=tuple(s for s in secrets if s))
    full = {**context, "facts": facts}
    changes: list[Change] = []
    notified: set[tuple[str, str]] = set()
    failed_roles: set[str] = set()
    for role in roles:
        state.role_changed = False
        role_tasks = list(tasks.get(role.name, ()))
        if absent:
            role_tasks.reverse()
        for task in role_tasks:
            if role.name in failed_roles:
                changes.append(_skip(task, "skipped: an earlier task of this role failed"))
                continue
            change = _plan_task(role, task, full, facts, state, renderer, images or {})
            change = _redacted(change, state.secrets)
            changes.append(change)
            if change.status == "failed":
                failed_roles.add(role.name)
            if change.changed:
                state.role_changed = True
                notified.update((role.name, name) for name in task.notify)
    if state.reload_pending:
        changes.append(Change("systemd", "daemon-reload", "systemd", "changed",
                              "daemon-reload (unit files changed)",
                              actions=(Run(("systemctl", "daemon-reload")),)))
        state.reload_pending = False
    for role in roles:
        if role.name in failed_roles:
            continue
        for handler in handlers.get(role.name, ()):
            if (role.name, handler.name) not in notified:
                continue
            change = _plan_task(role, handler, full, facts, state, renderer, images or {})
            changes.append(_redacted(replace(change, handler=True), state.secrets))
    return changes


def _skip(task: Task, why: str) -> Change:
    return Change(task.role, task.name, task.module, "skipped", why, handler=task.handler)


def _plan_task(role: Role, task: Task, context: Mapping[str, Any], facts: NodeFacts,
               state: _NodeState, renderer: Renderer,
               images: Mapping[str, ImageTarget]) -> Change:
    base = Change(task.role, task.name, task.module, "ok", handler=task.handler)
    if task.error:
        return replace(base, status="failed", summary=task.error)
    try:
        if task.when is not None and not renderer.expr(task.when, context):
            return replace(base, status="skipped", summary=f"skipped: not ({task.when})")
        planner = _PLANNERS[task.module]
        return planner(base, role, task.params, context, facts, state, renderer, images)
    except RenderError as error:
        return replace(base, status="failed", summary=str(error))


def _redacted(change: Change, secrets: Sequence[str]) -> Change:
    if not secrets:
        return change
    return replace(change, summary=_redact(change.summary, secrets),
                   diff=_redact(change.diff, secrets))


def _redact(text: str, secrets: Sequence[str]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


# --- template ------------------------------------------------------------------------------


def _template(base: Change, role: Role, p: Mapping[str, Any], context: Mapping[str, Any],
              facts: NodeFacts, state: _NodeState, renderer: Renderer, images) -> Change:
    dest = str(p["dest"])
    current = facts.file(dest)
    if state.absent:
        return _remove_file(base, dest, current, state)
    if current.type == "directory":
        return replace(base, status="failed", summary=f"{dest} is a directory")
    text = renderer.template(role, str(p["src"]), context)
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
            added, removed = _line_counts(current.content, content)
            what.append(f"update (+{added} -{removed})" if current.content is not None
                        else "update")
    else:
        _fix_attributes(current, dest, mode, owner, group, actions, what)
    if not actions:
        return replace(base, summary=dest)
    if is_unit_file(dest) and not same_content:
        state.reload_pending = True
    diff = "" if same_content else _diff(dest, current.content if current.exists else b"",
                                         content, p.get("secret_keys") or (),
                                         known=current.content is not None or not current.exists)
    return replace(base, status="changed", summary=f"{dest}: {', '.join(what)}", diff=diff,
                   actions=tuple(actions))


def _fix_attributes(current, path: str, mode: int, owner: str, group: str,
                    actions: list, what: list[str]) -> None:
    """Append the chmod/chown an existing path needs to have mode and owner:group."""
    if octal(current.mode or "0") != mode:
        actions.append(Run(("chmod", f"{mode:04o}", "--", path)))
        what.append(f"mode {octal(current.mode):04o} -> {mode:04o}")
    if (current.owner, current.group) != (owner, group):
        actions.append(Run(("chown", f"{owner}:{group}", "--", path)))
        what.append(f"owner {current.owner}:{current.group} -> {owner}:{group}")


def _remove_file(base: Change, path: str, current, state: _NodeState) -> Change:
    if not current.exists:
        return replace(base, summary=f"{path} absent")
    if current.type == "directory":
        return replace(base, status="failed", summary=f"{path} is a directory, not removed")
    state.removed.add(path)
    if is_unit_file(path):
        state.reload_pending = True
    return replace(base, status="changed", summary=f"{path}: remove",
                   actions=(Run(("rm", "-f", "--", path)),))


def _line_counts(old: bytes | None, new: bytes) -> tuple[int, int]:
    added = removed = 0
    for line in difflib.ndiff((old or b"").decode(errors="replace").splitlines(),
                              new.decode(errors="replace").splitlines()):
        if line.startswith("+ "):
            added += 1
        elif line.startswith("- "):
            removed += 1
    return added, removed


def _diff(path: str, old: bytes | None, new: bytes, secret_keys: Sequence[str], *,
          known: bool) -> str:
    """A unified diff of old -> new, values of secret_keys shown as ***."""
    if not known:
        return f"--- {path}\n+++ {path}\n(current content not shown: larger than the diff limit)\n"
    old_lines = _mask(old.decode(errors="replace").splitlines(keepends=True), secret_keys, None)
    new_lines = _mask(new.decode(errors="replace").splitlines(keepends=True), secret_keys,
                      old.decode(errors="replace").splitlines(keepends=True))
    return "".join(difflib.unified_diff(old_lines, new_lines, fromfile=f"{path} (now)",
                                        tofile=f"{path} (planned)"))


SECRET_MARKS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "PRIVATE")


def _secret_key(key: str, keys: Sequence[str]) -> str | None:
    """The variable name of a KEY=VALUE line if its value must be hidden, else None: a
    declared secret key, or any name that looks like one (a hand-added token)."""
    name = key.strip().removeprefix("export ").strip()
    if not name.replace("_", "").isalnum():
        return None
    return name if name in keys or any(mark in name.upper() for mark in SECRET_MARKS) else None


def _mask(lines: list[str], keys: Sequence[str], old: list[str] | None) -> list[str]:
    """The lines of a secret file (one whose task declares secret_keys) with every value that
    could be secret replaced by ***: those of secret-looking KEY=VALUE lines, and every line
    that is neither a comment nor KEY=VALUE (a hand edit could have put a bare token there).
    When old is given, a secret value that differs from old's is marked "(changed)"."""
    if not keys:
        return lines
    old_values = {}
    for line in old or []:
        key, sep, value = line.partition("=")
        if sep and _secret_key(key, keys):
            old_values[_secret_key(key, keys)] = value
    masked = []
    for line in lines:
        stripped = line.strip()
        key, sep, value = line.partition("=")
        name = _secret_key(key, keys) if sep else None
        if not stripped or stripped.startswith("#") or (sep and name is None and
                                                         key.strip().replace("_", "").isalnum()):
            masked.append(line)
        elif name is not None:
            changed = old is not None and old_values.get(name) != value
            masked.append(f"{key}={REDACTED}{' (changed)' if changed else ''}\n")
        else:
            masked.append(f"{REDACTED} (a line that is not KEY=VALUE)\n")
    return masked


# --- file ----------------------------------------------------------------------------------


def _file(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
          state: _NodeState, renderer, images) -> Change:
    path = str(p["path"])
    wanted = str(p.get("state", "directory"))
    current = facts.file(path)
    if wanted not in ("directory", "file", "absent"):
        return replace(base, status="failed", summary=f"file: unknown state '{wanted}'")
    if wanted == "absent" or (state.absent and wanted == "file"):
        return _remove_file(base, path, current, state)
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
    owner, group = str(p.get("owner", "root")), str(p.get("group", "root"))
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
        _fix_attributes(current, path, mode, owner, group, actions, what)
    if not actions:
        return replace(base, summary=path)
    return replace(base, status="changed", summary=f"{path}: {', '.join(what)}",
                   actions=tuple(actions))


# --- systemd -------------------------------------------------------------------------------


def _systemd(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
             state: _NodeState, renderer, images) -> Change:
    name = str(p["name"])
    unit = facts.unit(name)
    actions: list[Action] = []
    what: list[str] = []
    if state.absent and not base.handler:
        if unit.load == "not-found" and not unit.is_enabled:
            return replace(base, summary=f"{name} absent")
        if unit.active in ("active", "activating", "reloading"):
            actions.append(Run(("systemctl", "stop", name)))
            what.append("stop")
        if unit.active == "failed":
            actions.append(Run(("systemctl", "reset-failed", name)))
            what.append("reset-failed")
        if unit.enabled in ("enabled", "enabled-runtime"):
            actions.append(Run(("systemctl", "disable", name)))
            what.append("disable")
        state.stopped.add(name)
        if not actions:
            return replace(base, summary=f"{name} stopped, disabled")
        return replace(base, status="changed", summary=f"{name}: {', '.join(what)}",
                       actions=tuple(actions))
    if state.reload_pending or (unit.need_reload and not state.reloaded):
        actions.append(Run(("systemctl", "daemon-reload")))
        what.append("daemon-reload")
        state.reload_pending, state.reloaded = False, True
    enabled = p.get("enabled")
    if enabled is True and not unit.is_enabled:
        actions.append(Run(("systemctl", "enable", name)))
        what.append("enable")
    elif enabled is False and unit.enabled in ("enabled", "enabled-runtime"):
        actions.append(Run(("systemctl", "disable", name)))
        what.append("disable")
    wanted = p.get("state")
    if wanted == "started" and unit.active != "active":
        if unit.active == "failed":
            actions.append(Run(("systemctl", "reset-failed", name)))
        actions.append(Run(("systemctl", "start", name)))
        what.append("start" if unit.active != "failed" else "start (was failed)")
        state.started.add(name)
    elif wanted == "stopped" and unit.active in ("active", "activating", "failed"):
        actions.append(Run(("systemctl", "stop", name)))
        what.append("stop")
        state.stopped.add(name)
    elif wanted == "restarted":
        if name in state.started or name in state.stopped:
            verb = "started" if name in state.started else "stopped"
            return replace(base, summary=f"{name}: not restarted ({verb} in this run)")
        actions.append(Run(("systemctl", "restart", name)))
        what.append("restart")
    elif wanted not in (None, "started", "stopped", "restarted"):
        return replace(base, status="failed", summary=f"systemd: unknown state '{wanted}'")
    if not actions:
        return replace(base, summary=f"{name}: {unit.active}, {unit.enabled or 'no unit file'}")
    return replace(base, status="changed", summary=f"{name}: {', '.join(what)}",
                   actions=tuple(actions))


# --- command -------------------------------------------------------------------------------


def _command(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
             state: _NodeState, renderer, images) -> Change:
    argv = tuple(str(a) for a in p["argv"])
    if state.absent:
        return replace(base, status="skipped", summary="skipped: no inverse of a command")
    creates = p.get("creates")
    if creates and facts.file(str(creates)).exists:
        return replace(base, summary=f"{creates} exists")
    unless = p.get("unless")
    if unless and facts.guards.get(tuple(str(a) for a in unless)) == 0:
        return replace(base, summary="guard holds: " + " ".join(str(a) for a in unless))
    return replace(base, status="changed", summary="run " + " ".join(argv),
                   actions=(Run(argv),))


# --- docker_image --------------------------------------------------------------------------


def _docker_image(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
                  state: _NodeState, renderer, images: Mapping[str, ImageTarget]) -> Change:
    ref = normalize_ref(str(p["name"]))
    if facts.images is None:
        return replace(base, status="failed",
                       summary=f"docker did not list images: {facts.images_error}")
    present = facts.images.get(ref)
    if state.absent:
        if present is None:
            return replace(base, summary=f"{ref} absent")
        return replace(base, status="changed", summary=f"{ref}: remove",
                       actions=(Run(("docker", "image", "rm", ref)),))
    target = images.get(ref)
    if target is None or target.error or not target.image_id:
        why = target.error if target else "no source resolved"
        return replace(base, status="failed", summary=f"{ref}: {why}")
    pinned = str(p.get("id") or "")
    if pinned and target.image_id != pinned:
        return replace(base, status="failed", summary=(
            f"{ref}: the source {target.source} has {short_id(target.image_id)}, not the "
            f"pinned {short_id(pinned)}"))
    if present == target.image_id:
        return replace(base, summary=f"{ref} {short_id(present)}")
    now = f"has {short_id(present)}" if present else "missing"
    return replace(base, status="changed",
                   summary=f"{ref}: {now}, load {short_id(target.image_id)} from {target.source}",
                   actions=(Transfer(ref, target.image_id, target.source),))


# --- assert --------------------------------------------------------------------------------


def _assert(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
            state: _NodeState, renderer: Renderer, images) -> Change:
    if state.absent:
        return replace(base, status="skipped", summary="skipped (unprovision)")
    that = p["that"]
    conditions = [that] if isinstance(that, str) else list(that)
    if state.role_changed:
        return replace(base, status="pending", summary="checked after the changes above")
    for condition in conditions:
        if not renderer.expr(str(condition), context):
            message = p.get("fail_msg")
            text = str(renderer.value(message, context)) if message else f"failed: {condition}"
            return replace(base, status="failed", summary=text)
    return replace(base, summary=f"{len(conditions)} condition(s) hold")


# --- authorized_key ------------------------------------------------------------------------


def marked(line: str, marker: str) -> bool:
    """Whether an authorized_keys line is the one a task manages: a key line (not a
    comment) whose last word is the marker."""
    words = line.split()
    return bool(words) and not words[0].startswith("#") and words[-1] == marker


def _authorized_key(base: Change, role: Role, p: Mapping[str, Any], context, facts: NodeFacts,
                    state: _NodeState, renderer, images) -> Change:
    """One marked line in an authorized_keys file: `[options] key marker`, replacing any
    other line with that marker; in absent mode every marked line goes (and the file, if
    nothing else was in it). An empty key changes nothing (no key to authorize)."""
    path, marker = str(p["path"]), str(p["marker"])
    key, options = str(p.get("key") or "").strip(), str(p.get("options") or "").strip()
    if not marker or len(marker.split()) != 1:
        return replace(base, status="failed", summary=f"marker {marker!r}: one word")
    if any(c in key + options for c in "\n\r\0"):
        return replace(base, status="failed", summary="key or options hold a line break")
    if not key and not state.absent:
        return replace(base, status="skipped", summary=f"skipped: no key to authorize in {path}")
    current = facts.file(path)
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
                   diff=_diff(path, old if current.exists else b"", content, (), known=True),
                   actions=(Put(path, content, mode),))


_PLANNERS = {"template": _template, "file": _file, "systemd": _systemd, "command": _command,
             "docker_image": _docker_image, "assert": _assert,
             "authorized_key": _authorized_key}
