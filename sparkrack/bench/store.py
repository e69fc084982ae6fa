"""Where bench results are kept: beside the deployment record, and on this machine.

- on the head node: /var/lib/sparkrack/deployments/bench/<NAME>.json (next to current.json
  and last-good.json; written atomically like the records);
- here: $XDG_STATE_HOME/sparkrack/bench/<rack_name>/<NAME>.json (default
  ~/.local/state/...), so `bench.compare` works with the rack down.

`load` finds a name here first, then on the head; a path to a .json file also works.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkrack.bench.result import BenchResult
from sparkrack.core.errors import UsageError
from sparkrack.deployments.record import RECORD_DIR, store_on_head
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory

REMOTE_DIR = f"{RECORD_DIR}/bench"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$")


def check_name(name: str) -> str:
    """name if it can name a result file; UsageError otherwise."""
    if not _NAME.match(name or "") or name.endswith(".json"):
        raise UsageError(f"bad result name {name!r}",
                         fix="letters, digits, '.', '_' and '-', e.g. --save vllm-mtp3")
    return name


def local_dir(inventory: Inventory) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sparkrack" / "bench" / inventory.vars.rack_name


def save_local(inventory: Inventory, result: BenchResult) -> Path:
    """Write the result here (atomic rename); its path."""
    folder = local_dir(inventory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{check_name(result.name)}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(result.to_json())
    os.replace(tmp, path)
    return path


def save_remote(fleet: Fleet, inventory: Inventory, result: BenchResult) -> str:
    """Write the result beside the deployment record on the head; its path there."""
    return store_on_head(fleet, inventory, REMOTE_DIR, check_name(result.name),
                         result.to_json().encode(), "the bench result")


def load(inventory: Inventory, name: str, fleet: Fleet | None = None) -> tuple[BenchResult, str]:
    """(result, where it was read) for a name (here, then the head) or a .json path."""
    if name.endswith(".json") or os.sep in name:
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"no such file: {name}")
        return _parse(path.read_text(), str(path)), str(path)
    check_name(name)
    path = local_dir(inventory) / f"{name}.json"
    if path.is_file():
        return _parse(path.read_text(), str(path)), str(path)
    if fleet is not None:
        head = inventory.head.name
        remote = f"{REMOTE_DIR}/{name}.json"
        got = fleet.get({head: [remote]}, timeout=30)[head]
        if got.ok:
            return _parse(got.files[remote].decode(), f"{head}:{remote}"), f"{head}:{remote}"
    known = saved_names(inventory)
    raise UsageError(f"no saved bench result {name!r} here or on the head node",
                     fix="saved here: " + (", ".join(known) if known else "none")
                     + "; `invoke bench --save NAME` saves one")


def saved_names(inventory: Inventory) -> list[str]:
    """Names of the results saved here, newest first."""
    folder = local_dir(inventory)
    if not folder.is_dir():
        return []
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [p.stem for p in files]


def _parse(text: str, where: str) -> BenchResult:
    try:
        return BenchResult.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{where}: not a bench result ({exc})") from None
