"""The twin the rehearsal rack is built as (`invoke rehearsal.up --twin`): which inventory
it is, and each node's shape (its simulated GPU's name, driver, CUDA and memory), kept in
STATE_DIR/twin.json while the twin is the rack. A plain `rehearsal.up` of another
inventory removes it and the twin's node disks, so the standard rack boots as it was."""

from __future__ import annotations

import json
from pathlib import Path

from sparkrack.core.atomic import write_atomically
from sparkrack.rehearsal.layout import STATE_DIR

TWIN_FILE = STATE_DIR / "twin.json"


def read_twin() -> dict | None:
    """{"inventory": DIR, "nodes": {name: {"gpu": {...}}}} or None when no twin is built."""
    try:
        data = json.loads(TWIN_FILE.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("nodes"), dict) else None


def write_twin(inventory_dir: Path, nodes: dict[str, dict]) -> None:
    TWIN_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(TWIN_FILE, json.dumps({"inventory": str(inventory_dir.resolve()),
                                            "nodes": nodes}, indent=1) + "\n")


def is_twin(inventory_dir: Path, twin: dict | None) -> bool:
    """Whether the twin on record is this inventory's."""
    return twin is not None and twin.get("inventory") == str(Path(inventory_dir).resolve())
