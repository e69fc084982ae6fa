"""Diff output of planned file writes: unified diffs, line counts, secret values masked."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

REDACTED = "***"
# a name holding one of these (any case) is a secret's, as in the audit log's masking
SECRET_MARKS = ("TOKEN", "SECRET", "PASS", "PWD", "AUTH", "KEY", "PRIVATE")


def line_counts(old: bytes | None, new: bytes) -> tuple[int, int]:
    """(lines added, lines removed) from old to new."""
    added = removed = 0
    for line in difflib.ndiff((old or b"").decode(errors="replace").splitlines(),
                              new.decode(errors="replace").splitlines()):
        if line.startswith("+ "):
            added += 1
        elif line.startswith("- "):
            removed += 1
    return added, removed


def file_diff(path: str, old: bytes | None, new: bytes, secret_keys: Sequence[str], *,
              known: bool) -> str:
    """A unified diff of old -> new, values of secret_keys shown as ***."""
    if not known:
        return f"--- {path}\n+++ {path}\n(current content not shown: larger than the diff limit)\n"
    old_lines = _mask(old.decode(errors="replace").splitlines(keepends=True), secret_keys, None)
    new_lines = _mask(new.decode(errors="replace").splitlines(keepends=True), secret_keys,
                      old.decode(errors="replace").splitlines(keepends=True))
    return "".join(difflib.unified_diff(old_lines, new_lines, fromfile=f"{path} (now)",
                                        tofile=f"{path} (planned)"))


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
