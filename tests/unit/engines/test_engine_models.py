"""Model data: found by model_name, consistent with the field report's figures, checked."""

import shutil
from pathlib import Path

import pytest

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import shipped
from sparkrack.engines import load_model
from sparkrack.engines.model_data import GIB
from sparkrack.inventory import load_inventory

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = REPO / "inventory" / "rehearsal"
POOL_GIB = 127600748 * 1024 / GIB  # one GB10's unified memory: 121.69 GiB, not GB


@pytest.mark.parametrize("inventory", [REPO / "inventory" / "rack", REHEARSAL])
def test_the_shipped_inventories_have_data_for_their_model(inventory):
    model = load_model(inventory, load_inventory(inventory).vars.model_name)
    assert model.name == "GLM-5.3" and model.dsa and model.params_billion == 744
    assert model.file == shipped("models") / "glm-5.3.yml"


def test_the_figures_agree_with_the_field_report():
    model = load_model(REHEARSAL, "GLM-5.3")
    # "1M context needs 52.68 GiB of KV per node and 52.60 is free after weights"
    assert round(model.kv_gib_per_node("sglang", "fp8_e4m3", 1 << 20), 2) == 52.68
    assert model.free_after_weights_gib_per_node == 52.60
    assert round(model.weights_gib_per_node + model.free_after_weights_gib_per_node, 2) == round(
        POOL_GIB, 2)
    # "KV pool 567,232 tokens" at --mem-fraction-static 0.80 fits what that fraction leaves
    pool = model.measured_kv_pool_tokens["sglang"]["512k"]
    assert pool == 567232
    budget = 0.80 * POOL_GIB - model.weights_gib_per_node
    assert abs(model.kv_gib_per_node("sglang", "fp8_e4m3", pool) / budget - 1) < 0.01
    assert model.measured_kv_pool_tokens["vllm"]["1m-nvfp4"] == 1106688
    assert model.kv_bytes_per_token("vllm", "nvfp4_ds_mla") is None
    assert model.kv_gib_per_node("sglang", "nvfp4", 1) is None


def test_unknown_model():
    with pytest.raises(UsageError) as caught:
        load_model(REHEARSAL, "GLM-5.2")
    assert caught.value.message == "no model data for 'GLM-5.2' (did you mean 'GLM-5.3'?)"


def test_an_inventorys_own_model_file_wins_and_mistakes_name_the_line(tmp_path):
    rack = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    (rack / ".sparkrack" / "models").mkdir(parents=True)
    text = (shipped("models") / "glm-5.3.yml").read_text()
    own = rack / ".sparkrack" / "models" / "mine.yml"
    own.write_text(text.replace("weights_gib_per_node: 69.09", "weights_gib_per_node: 61"))
    assert load_model(rack, "GLM-5.3").weights_gib_per_node == 61
    broken = text.replace("    fp8_e4m3: 53944", "    fp8_e4m3: lots")
    own.write_text(broken)
    with pytest.raises(InventoryError) as caught:
        load_model(rack, "GLM-5.3")
    line = broken[:broken.index("fp8_e4m3: lots")].count("\n") + 1
    assert caught.value.message == (f"{own}:{line}: fp8_e4m3: expected bytes per token, an "
                                    "integer >= 1, got 'lots'")
