"""The watchdog's key as the control machine records it: `.sparkrack/watchdog.json` in the
inventory directory, written by `watch.install`, read by role watchdog_key
(docs/formats.md#the-watchdogs-record).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sparkrack.core.errors import UsageError
from sparkrack.data import OWN_FOLDER
from sparkrack.inventory.watchdog_dir import install_dir_problem

RECORD_FILE = "watchdog.json"
MARKER = "sparkrack-watchdog"  # the comment ending the authorized_keys line (role default)
_PUBLIC_KEY = re.compile(r"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]{40,100}={0,2}")


@dataclass(frozen=True)
class WatchdogKey:
    """Where the watchdog runs and the key it logs in to the nodes with."""

    node: str
    install_dir: str
    public_key: str  # "ssh-ed25519 BASE64", no comment
    sources: tuple[str, ...] = ()  # addresses the node connects to the others from

    def as_dict(self) -> dict:
        return {"node": self.node, "install_dir": self.install_dir,
                "public_key": self.public_key, "from": list(self.sources)}

    def options(self) -> str:
        """The authorized_keys options the role writes: no forwarding, no pty, and only
        from the watchdog's node (when its addresses are known)."""
        return key_options(self.sources)


def watchdog_node(inventory, on: str | None, record: WatchdogKey | None):
    """The node named by --on, else where the record says the watchdog is, else the head."""
    if on:
        return inventory.node(on)
    if record is not None:
        return inventory.node(record.node)
    return inventory.head


def key_options(sources) -> str:
    """`restrict` plus `from="A,B"` for the given source addresses (none: restrict only)."""
    return f'restrict,from="{",".join(sources)}"' if sources else "restrict"


def check_public_key(text: str) -> str:
    """An ed25519 public key as `ssh-ed25519 BASE64` (the comment dropped); ValueError if
    text is anything else (it goes into every node's authorized_keys)."""
    if any(c in text.strip() for c in "\n\r\0"):
        raise ValueError("a public key is one line")
    words = text.strip().split()
    key = " ".join(words[:2])
    if not _PUBLIC_KEY.fullmatch(key):
        raise ValueError(f"not an ssh-ed25519 public key: {text.strip()[:60]!r}")
    return key


def check_sources(addresses) -> tuple[str, ...]:
    """IP addresses (for from="..."), each once, in order; ValueError for anything else."""
    found = []
    for address in addresses:
        found.append(str(ipaddress.ip_address(str(address).strip())))
    return tuple(dict.fromkeys(found))


def record_path(inventory_dir: Path) -> Path:
    """Where the record of the inventory at inventory_dir is."""
    return Path(inventory_dir) / OWN_FOLDER / RECORD_FILE


def read_record(inventory_dir: Path) -> WatchdogKey | None:
    """The recorded key, or None when there is none; UsageError naming the file if it is
    not what watch.install writes, or if it is still where earlier versions wrote it."""
    path = record_path(inventory_dir)
    old = Path(inventory_dir) / RECORD_FILE
    if old.exists():
        raise UsageError(f"{old}: the watchdog's key record is not read there (Ansible "
                         "would read it as inventory)", fix=f"move it to {path}")
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror}",
                         fix="make it readable, or run `invoke watch.install` again") from None
    try:
        data = json.loads(text)
        record = WatchdogKey(node=str(data["node"]), install_dir=str(data["install_dir"]),
                             public_key=check_public_key(str(data["public_key"])),
                             sources=check_sources(data.get("from") or ()))
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: not a watchdog key record ({error})",
                         fix="run `invoke watch.install` again (it rewrites it), or "
                         "`invoke watch.uninstall`") from None
    problem = install_dir_problem(record.install_dir)
    if problem:  # uninstall removes it whole: never a system directory
        raise UsageError(f"{path}: install_dir {record.install_dir!r} is {problem}: never "
                         "the watchdog's directory", fix="write there the directory watch.install "
                         "put it in (e.g. /opt/sparkrack-watchdog)")
    return record


def write_record(inventory_dir: Path, record: WatchdogKey) -> bool:
    """Record the key (atomically); False when the file already says exactly that."""
    from sparkrack.core.atomic import write_atomically

    path = record_path(inventory_dir)
    text = json.dumps(record.as_dict(), indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        return False
    write_atomically(path, text, 0o644)
    return True


def remove_record(inventory_dir: Path) -> bool:
    """Forget the key (and the inventory's .sparkrack/ folder, if that leaves it empty);
    False when none was recorded."""
    from sparkrack.core.atomic import remove

    path = record_path(inventory_dir)
    if not path.exists():
        return False
    remove(path)
    try:
        path.parent.rmdir()
    except OSError:  # it holds overrides or other records: keep it
        pass
    return True


def node_vars(inventory_dir: Path) -> dict:
    """The vars role watchdog_key reads: the recorded public key ('' when none) and the
    addresses it may come from."""
    record = read_record(inventory_dir)
    if record is None:
        return {"watchdog_pubkey": "", "watchdog_from": [], "watchdog_node": ""}
    return {"watchdog_pubkey": record.public_key, "watchdog_from": list(record.sources),
            "watchdog_node": record.node}
