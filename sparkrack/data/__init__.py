"""The data sparkrack ships inside the package, and where an operator's copies override it.

    roles/                    provisioning roles: site.yml and one folder per role (at the
                              checkout's top, shipped as the package sparkrack.roles)
    sparkrack/data/engines/   engine profiles, <engine>.yml
    sparkrack/data/models/    model data for the memory rules, <name>.yml
    sparkrack/data/rules.yml  the SM121 rules (not overridable)

An inventory directory may hold its own `.sparkrack/engines/`, `.sparkrack/models/` and
`.sparkrack/roles/`. The lookup order is the inventory's folder first, then the package's:
per file for engine profiles (`<engine>.yml`) and model data (by `model_name`), per role
folder (and `site.yml`) for roles. The folder is hidden because Ansible reads every other
entry of an inventory directory as more inventory; for that reason the files sparkrack
writes beside an inventory go there too (the watchdog's key record, watchdog.json; the
real rack's known_hosts). A bare `engines/`, `models/` or `roles/` folder in the
inventory (the earlier layout) is refused, naming the folder to move.

The package is found with importlib.resources; sparkrack runs from files on disk (a
wheel installed by pip, a checkout installed with `pip install -e .`, the watchdog's
shipped copy), never from a zip. The roles are the package sparkrack.roles: the top-level
roles/ folder, which pyproject.toml maps into the wheel as sparkrack/roles/ and the
editable install's finder maps to the checkout's roles/.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from sparkrack.errors import InventoryError, UsageError

OWN_FOLDER = ".sparkrack"  # sparkrack's folder inside an inventory directory
KINDS = ("engines", "models", "roles")
OWN_PACKAGE = {"roles": "sparkrack.roles"}  # a kind shipped as a package of its own


def shipped(name: str) -> Path:
    """The package's own data entry `name` (a folder of KINDS, or rules.yml)."""
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
