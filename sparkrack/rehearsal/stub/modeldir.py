"""The model directory of a stub deployment on the rehearsal nodes (control side): what a stub
rank reads there (docs/formats.md#the-stub-model-directory).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from . import config as stubconfig

MANIFEST_NAME = "sparkrack-manifest.sha256"
SHARDS = 2
SHARD_BYTES = 64 * 1024

MODEL_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 1048576,
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
    "torch_dtype": "bfloat16",
    "sparkrack_stub": True,
}


def model_files(config: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """{file name: content} of a stub model directory (deterministic for one config)."""
    files: dict[str, bytes] = {
        "config.json": json.dumps(MODEL_CONFIG, indent=1, sort_keys=True).encode() + b"\n"}
    weight_map = {}
    for index in range(1, SHARDS + 1):
        name = f"model-{index:05d}-of-{SHARDS:05d}.safetensors"
        seed = hashlib.sha256(name.encode()).digest()
        files[name] = (seed * (SHARD_BYTES // len(seed) + 1))[:SHARD_BYTES]
        weight_map[f"model.layers.{index - 1}.weight"] = name
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": SHARDS * SHARD_BYTES}, "weight_map": weight_map},
        indent=1, sort_keys=True).encode() + b"\n"
    files[MANIFEST_NAME] = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n"
        for name, data in sorted(files.items())).encode()
    if config is not None:
        files[stubconfig.CONFIG_NAME] = json.dumps(
            stubconfig.check(dict(config)), indent=1, sort_keys=True).encode() + b"\n"
    return files


def write_stub_model(fleet, config: Mapping[str, Any] | None = None, *,
                     nodes: Iterable[str] | None = None, timeout: float | None = None):
    """Write the stub model directory at the inventory's model_path on the fleet's nodes
    (or the named ones): config.json, fake shards, manifest and, given config,
    sparkrack-stub.json (config None: an existing one is removed, so ranks use defaults).

    StubConfigError for a bad config (before touching any node); FleetError if a node
    fails. Returns the FleetResult of the upload.
    """
    files = model_files(config)
    model_path = fleet.inventory.vars.model_path.rstrip("/")
    names = [node.name for node in fleet.nodes] if nodes is None else list(nodes)
    prepare = ["mkdir", "-p", model_path]
    if config is None:
        prepare = ["sh", "-c", 'mkdir -p "$1" && rm -f "$1/$2"', "sh", model_path,
                   stubconfig.CONFIG_NAME]
    fleet.run({name: prepare for name in names}, timeout=timeout).raise_for_failures()
    uploads = [(data, f"{model_path}/{name}", 0o644) for name, data in sorted(files.items())]
    result = fleet.put({name: uploads for name in names}, timeout=timeout)
    result.raise_for_failures()
    return result
