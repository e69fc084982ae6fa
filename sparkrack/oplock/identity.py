"""Who is operating, from where, and on which inventory (light: stdlib only)."""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
from pathlib import Path

from sparkrack.data import OWN_FOLDER

STATE_ENV = "SPARKRACK_STATE_DIR"


def operator() -> str:
    """user@host of this process: how records and the lock name an operator."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def state_dir() -> Path:
    """Where this machine keeps sparkrack's local state (the local audit copy, the local
    lock): $SPARKRACK_STATE_DIR, else $XDG_STATE_HOME/sparkrack, else
    ~/.local/state/sparkrack."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base).expanduser() / "sparkrack"


def inventory_digest(directory: Path) -> str:
    """sha256 over the inventory's files (relative path and content of each, sorted),
    skipping hidden files (but not the overrides folder, .sparkrack/) and nested
    inventories (a folder with its own hosts.yml)."""
    root = Path(directory)
    digest = hashlib.sha256()
    for path in sorted(_files(root)):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


def _files(root: Path):
    for entry in root.iterdir():
        if entry.name.startswith(".") and entry.name != OWN_FOLDER:
            continue
        if entry.is_dir():
            if not (entry / "hosts.yml").exists():
                yield from _files(entry)
        elif entry.is_file():
            yield entry
