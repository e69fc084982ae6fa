"""Model data files (`models/*.yml`, found by catalog.py): the sizes the memory safety rules
check a launch against. The format: docs/formats.md#model-data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkrack.core.errors import InventoryError, UsageError, did_you_mean
from sparkrack.data import OWN_FOLDER
from sparkrack.engines.catalog import model_files
from sparkrack.engines.datafile import (
    Section,
    is_count,
    is_name,
    is_number,
    is_text,
    read_section,
)
from sparkrack.inventory.schema import FrozenMapping

GIB = 1 << 30
_KEYS = ("model_name", "params_billion", "quantization", "dsa",
         "free_after_weights_gib_per_node", "weights_gib_per_node",
         "kv_bytes_per_token_per_node", "measured_kv_pool_tokens")


@dataclass(frozen=True)
class ModelData:
    """What the memory checks need to know about one model, per node at full TP."""

    name: str
    file: Path
    params_billion: int
    quantization: str
    dsa: bool
    free_after_weights_gib_per_node: float
    weights_gib_per_node: float
    kv_bytes_per_token_per_node: FrozenMapping  # engine -> kv dtype -> bytes
    measured_kv_pool_tokens: FrozenMapping  # engine -> profile -> tokens

    def kv_bytes_per_token(self, engine: str, kv_dtype: str) -> int | None:
        """Bytes of KV per token per node for engine and KV dtype; None when not known."""
        return self.kv_bytes_per_token_per_node.get(engine, {}).get(kv_dtype)

    def kv_gib_per_node(self, engine: str, kv_dtype: str, tokens: int) -> float | None:
        """GiB of KV per node that tokens of context need; None when not known."""
        per_token = self.kv_bytes_per_token(engine, kv_dtype)
        return None if per_token is None else per_token * tokens / GIB


def load_model(inventory_dir: Path, model_name: str) -> ModelData:
    """The model data whose model_name matches; UsageError naming the known models if none."""
    found: dict[str, ModelData] = {}
    for file in model_files(inventory_dir):
        model = read_model_file(file)
        first = found.get(model.name)
        if first is not None and first.file.parent == file.parent:
            raise InventoryError(file, None, f"model '{model.name}' is also in {first.file}",
                                 fix="keep one file per model_name in a folder")
        found.setdefault(model.name, model)
    if model_name not in found:
        raise UsageError(f"no model data for '{model_name}'{did_you_mean(model_name, found)}",
                         fix=f"known models: {', '.join(found) or 'none'}; add "
                         f"{OWN_FOLDER}/models/<name>.yml to the inventory (format: {__name__})")
    return found[model_name]


def read_model_file(file: Path) -> ModelData:
    """One model data file, read and checked."""
    top = read_section(file, _KEYS)
    return ModelData(
        name=top.value("model_name", is_text, "the inventory's model_name"), file=file,
        params_billion=top.value("params_billion", is_count, "an integer >= 1"),
        quantization=top.value("quantization", is_name, "a name such as nvfp4"),
        dsa=top.value("dsa", lambda v: isinstance(v, bool), "true or false"),
        free_after_weights_gib_per_node=float(top.value(
            "free_after_weights_gib_per_node", is_number, "GiB, a number >= 0")),
        weights_gib_per_node=float(top.value("weights_gib_per_node", is_number,
                                             "GiB, a number >= 0")),
        kv_bytes_per_token_per_node=_table(top.section("kv_bytes_per_token_per_node"),
                                           "bytes per token, an integer >= 1"),
        measured_kv_pool_tokens=_table(top.section("measured_kv_pool_tokens", required=False),
                                       "tokens, an integer >= 1"))


def _table(section: Section, expected: str) -> FrozenMapping:
    """A two-level mapping engine -> name -> count."""
    table = {}
    for engine in section:
        row = section.section(engine)
        table[engine] = FrozenMapping({key: row.value(key, is_count, expected) for key in row})
    return FrozenMapping(table)
