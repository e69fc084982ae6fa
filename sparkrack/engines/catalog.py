"""Where engine profiles and model data live: the inventory first, then the repo's inventory/.

Lookup is per file. `<inventory>/engines/<engine>.yml` wins when it exists, else the repo's
`inventory/engines/<engine>.yml` is used; so an inventory without an `engines/` folder (the
rehearsal rack's) runs the shipped profiles, and one that needs its own profiles for an
engine copies that one file. Model data works the same way by `model_name`: the first file
in `<inventory>/models/*.yml`, then in the repo's `inventory/models/*.yml`, whose
`model_name` matches. The repo folder is found next to the package (an editable install
or a checkout); the real rack's inventory is that folder itself.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack.engines.datafile import did_you_mean
from sparkrack.errors import InventoryError, UsageError

REPO_INVENTORY = Path(__file__).resolve().parents[2] / "inventory"
ENGINES_DIR = "engines"
MODELS_DIR = "models"


def search_dirs(inventory_dir: Path, kind: str) -> tuple[Path, ...]:
    """The folders searched for kind ('engines' or 'models'), in order, each once; a file
    where the inventory's folder belongs is refused (it would hide nothing silently)."""
    own, shipped = Path(inventory_dir) / kind, REPO_INVENTORY / kind
    if own.exists() and not own.is_dir():
        raise InventoryError(own, None, "a file where a directory belongs",
                             fix=f"{kind}/ is a folder of <name>.yml files; move this aside")
    same = own.resolve() == shipped.resolve()
    return tuple(d for d in ((own,) if same else (own, shipped)) if d.is_dir())


def engine_names(inventory_dir: Path) -> tuple[str, ...]:
    """Every engine that has a profile file, sorted."""
    return tuple(sorted({file.stem for folder in search_dirs(inventory_dir, ENGINES_DIR)
                         for file in folder.glob("*.yml")}))


def engine_file(inventory_dir: Path, engine: str) -> Path:
    """The profile file of engine; UsageError naming the valid engines if there is none."""
    for folder in search_dirs(inventory_dir, ENGINES_DIR):
        file = folder / f"{engine}.yml"
        if file.is_file():
            return file
        if file.exists():  # a directory (or worse) must not hide behind the shipped file
            raise InventoryError(file, None, "a directory where a profile file belongs",
                                 fix=f"make {file.name} the engine's profile file, or "
                                 "remove it to use the shipped one")
    names = engine_names(inventory_dir)
    raise UsageError(f"unknown engine '{engine}'{did_you_mean(engine, names)}",
                     fix="valid engines: " + (", ".join(names) or f"none (no {ENGINES_DIR}/ "
                                              "folder with <engine>.yml files)"))


def model_files(inventory_dir: Path) -> tuple[Path, ...]:
    """Every model data file, the inventory's before the repo's, each folder sorted."""
    return tuple(file for folder in search_dirs(inventory_dir, MODELS_DIR)
                 for file in sorted(folder.glob("*.yml")))
