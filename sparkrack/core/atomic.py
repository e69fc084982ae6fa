"""Durable local writes: a file is replaced whole or not at all, and survives a power cut.

`write_atomically` writes beside the target, fsyncs the file, renames it over the target
and fsyncs the directory (without that last step a crash can lose the rename). `remove`
and `fsync_dir` finish a multi-file change in the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (renames, removals) durable."""
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def write_atomically(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Replace path with data: temporary file (mode: given, else the old file's, else
    0644), fsync, rename, fsync of the directory. Nothing is left behind on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def copy_atomically(source: Path, target: Path) -> None:
    """A durable copy of source at target (same mode)."""
    write_atomically(target, source.read_bytes(), source.stat().st_mode & 0o7777)


def remove(path: Path) -> None:
    """Remove path durably (missing is fine)."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
