"""The data sparkrack ships inside the package (engine profiles, model data, the rules; the
roles and the monitoring files as the packages sparkrack.roles and sparkrack.deploy), found
with importlib.resources, and where an inventory's own copies override it
(docs/inventory.md#shipped-data-and-your-own).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from sparkrack.core.errors import InventoryError, UsageError

OWN_FOLDER = ".sparkrack"  # sparkrack's folder inside an inventory directory
KINDS = ("engines", "models", "roles")
# shipped as a package of its own (a top-level folder of the checkout)
OWN_PACKAGE = {"roles": "sparkrack.roles", "deploy": "sparkrack.deploy"}


def shipped(name: str) -> Path:
    """The package's own data entry `name` (a folder of KINDS, rules.yml, or deploy)."""
    try:
        root = files(OWN_PACKAGE.get(name, __name__))
    except ModuleNotFoundError:  # a copy of sparkrack/ run without installing it
        raise UsageError(f"sparkrack's {name} are not installed: {OWN_PACKAGE[name]} is "
                         "missing", fix="pip install -e . in the checkout, or install the "
                         "wheel") from None
    if not isinstance(root, Path):
        raise RuntimeError(f"sparkrack's data is in {root}, not a folder: install sparkrack "
                           "as files (pip install), not as a zip")
    return root if name in OWN_PACKAGE else root / name


def search_dirs(inventory_dir: Path | None, kind: str) -> tuple[Path, ...]:
    """The folders searched for kind (one of KINDS), in order: the inventory's own, when
    it exists, then the package's. A file where the inventory's folder belongs, or a
    folder left in the old place, is refused naming what to do."""
    package = shipped(kind)
    if inventory_dir is None:
        return (package,)
    inventory_dir = Path(inventory_dir)
    old = inventory_dir / kind
    if old.is_dir():
        raise InventoryError(old, None, f"{kind}/ in an inventory directory is not read "
                             "(Ansible would read it as inventory)",
                             fix=f"move it to {inventory_dir / OWN_FOLDER / kind}")
    own = inventory_dir / OWN_FOLDER / kind
    if own.exists() and not own.is_dir():
        raise InventoryError(own, None, "a file where a directory belongs",
                             fix=f"{OWN_FOLDER}/{kind}/ is a folder of overrides; move this aside")
    return (own, package) if own.is_dir() else (package,)
