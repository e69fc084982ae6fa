"""What the modules that write files share: modes, owners, removal, unit-file paths."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkrack.provision.changes import Action, Change, Run
from sparkrack.facts.files import FileFacts
from sparkrack.provision.modules.base import PlanState

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")


def octal(mode: Any) -> int:
    """A file mode given as "0644", "644", 0o644 or 420 -> int."""
    if isinstance(mode, int):
        return mode
    return int(str(mode), 8)


def is_unit_file(path: str) -> bool:
    """Whether path is a systemd unit file or drop-in (a change needs daemon-reload)."""
    return any(path.startswith(directory + "/") for directory in UNIT_DIRS)


def fix_attributes(current: FileFacts, path: str, mode: int, owner: str, group: str,
                   actions: list[Action], what: list[str]) -> None:
    """Append the chmod/chown an existing path needs to have mode and owner:group."""
    if octal(current.mode or "0") != mode:
        actions.append(Run(("chmod", f"{mode:04o}", "--", path)))
        what.append(f"mode {octal(current.mode):04o} -> {mode:04o}")
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
