"""Plans as data: a node's rendered tasks and its facts in, one `Change` per task out (pure).
What each module gathers and plans is its own file's (modules/); this is the machinery
around them: when, failures, deferred changes, handlers, absent mode
(docs/provisioning.md#writing-a-role).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.queries import Query
from sparkrack.provision.changes import Change
from sparkrack.provision.diffs import REDACTED
from sparkrack.provision.modules import REGISTRY
from sparkrack.provision.modules.base import PlanState, Step
from sparkrack.provision.renderer import Renderer, RenderError
from sparkrack.provision.roletasks import Role, Task
from sparkrack.transfer.images import ImageTarget


def queries(tasks: Sequence[Task]) -> list[Query]:
    """Every fact the tasks need, for the one gather round trip."""
    found: list[Query] = []
    for task in tasks:
        if not task.error:
            found.extend(REGISTRY[task.module].queries(task.params))
    return list(dict.fromkeys(found))


def plan_node(roles: Sequence[Role], tasks: Mapping[str, Sequence[Task]],
              handlers: Mapping[str, Sequence[Task]], context: Mapping[str, Any],
              facts: ProvisionFacts, *, renderer: Renderer, absent: bool = False,
              images: Mapping[str, ImageTarget] | None = None, user: str = "root",
              secrets: Sequence[str] = ()) -> list[Change]:
    """One Change per task of roles (by role, in order), then the handlers that run.

    context is the node's vars; `facts` is added for expressions and templates. images
    maps normalized refs to the rack-wide ImageTarget (docker_image). secrets are values
    to blank out of every summary and diff.
    """
    state = PlanState(user=user, absent=absent, secrets=tuple(s for s in secrets if s))
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
    for module in REGISTRY.values():
        deferred = module.finish(state) if module.finish else None
        if deferred is not None:
            changes.append(deferred)
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


def _plan_task(role: Role, task: Task, context: Mapping[str, Any], facts: ProvisionFacts,
               state: PlanState, renderer: Renderer,
               images: Mapping[str, ImageTarget]) -> Change:
    base = Change(task.role, task.name, task.module, "ok", handler=task.handler)
    if task.error:
        return replace(base, status="failed", summary=task.error)
    try:
        if task.when is not None and not renderer.expr(task.when, context):
            return replace(base, status="skipped", summary=f"skipped: not ({task.when})")
        return REGISTRY[task.module].plan(
            Step(base, role, task.params, context, facts, state, renderer, images))
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
