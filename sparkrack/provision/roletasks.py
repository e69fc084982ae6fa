"""A role and its tasks as data: the role folder read and checked, each task as written and
as rendered for one node (roles.py loads them, the modules plan them;
docs/provisioning.md#writing-a-role)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sparkrack.core.errors import UsageError


class RoleError(UsageError):
    """A role file is wrong: names the file, the task and the fix."""


@dataclass(frozen=True)
class TaskDef:
    """One task as written in a role file (nothing rendered yet)."""

    role: str
    name: str
    module: str
    params: Mapping[str, Any]
    notify: tuple[str, ...] = ()
    when: str | None = None
    loop: Any = None
    handler: bool = False
    where: str = ""


@dataclass(frozen=True)
class Role:
    """A role folder, read and checked."""

    name: str
    path: Path
    defaults: Mapping[str, Any]
    tasks: tuple[TaskDef, ...]
    handlers: tuple[TaskDef, ...]

    def template_path(self, src: str) -> Path:
        """The template file src of this role (refusing paths that leave templates/)."""
        base = (self.path / "templates").resolve()
        path = (base / src).resolve()
        if base not in path.parents:
            raise RoleError(f"{self.path}: template '{src}' is outside templates/",
                            fix="name a file under the role's templates/ directory")
        return path


@dataclass(frozen=True)
class Task(TaskDef):
    """A task rendered for one node: name and params filled from the node's vars, one per
    item of its loop."""

    item: Any = None
    error: str | None = None  # rendering failed: the task fails with this message


def rendered(task: TaskDef, **changes: Any) -> Task:
    """task as rendered for one node, with changes (name, params, item, error)."""
    return Task(**{**{f.name: getattr(task, f.name) for f in fields(TaskDef)}, **changes})
