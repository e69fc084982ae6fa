"""Where engine profiles and model data live: the inventory's overrides, then the package's.

Lookup is per file (sparkrack.data says where each folder is). An inventory's
`.sparkrack/engines/<engine>.yml` wins when it exists, else the shipped
`sparkrack/data/engines/<engine>.yml` is used; so an inventory without overrides (both
shipped inventories) runs the shipped profiles, and one that needs its own profiles for an
engine copies that one file. Model data works the same way by `model_name`: the first file
in the inventory's `.sparkrack/models/*.yml`, then in the package's, whose `model_name`
matches.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack.core.errors import InventoryError, UsageError, did_you_mean
from sparkrack.data import search_dirs

ENGINES_DIR = "engines"
MODELS_DIR = "models"


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
                     fix="valid engines: " + (", ".join(names) or "none"))


def model_files(inventory_dir: Path) -> tuple[Path, ...]:
    """Every model data file, the inventory's before the package's, each folder sorted."""
    return tuple(file for folder in search_dirs(inventory_dir, MODELS_DIR)
                 for file in sorted(folder.glob("*.yml")))
