"""The engines' compile caches on each node: one folder per engine image and GPU arch, and the
variables that point each cache there (docs/engines.md#compile-caches-warm-restarts).

Pure: names and variables. The folders are made at a start (lifecycle/cachefolders.py), listed
and removed by `invoke caches` (cli/caches_tasks.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CACHE_ROOT = "/var/lib/sparkrack/engine-cache"  # on each node: root's, mode 0700 per folder
CACHE_MOUNT = "/var/cache/sparkrack"  # where a rank sees its node's folder
KEY_FILE = "sparkrack-cache.json"  # in each folder: what it was made for
SOURCE = "the compile cache folder bound at " + CACHE_MOUNT + " [sparkrack/engines/compilecaches.py]"
IMAGE_HEX = 16  # characters of the image ID's sha256 in a folder's name
UNKNOWN_IMAGE, UNKNOWN_ARCH = "<image-id>", "<gpu-arch>"  # plan --offline: not asked

# (variable, folder under CACHE_MOUNT): what every engine's libraries read, each checked
# against the pinned releases' sources (docs/engines.md#compile-caches-warm-restarts)
COMMON = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
          ("FLASHINFER_WORKSPACE_BASE", "flashinfer"), ("DG_JIT_CACHE_DIR", "deep_gemm"),
          ("CUDA_CACHE_PATH", "cuda"), ("TILELANG_CACHE_DIR", "tilelang"),
          ("CUTE_DSL_CACHE_DIR", "cute_dsl"), ("TVM_FFI_CACHE_DIR", "tvm_ffi"),
          ("TORCH_EXTENSIONS_DIR", "torch_extensions"))
# ... and each engine's own: SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR, and
# builds its TVM-FFI JIT kernels under SGLANG_JIT_CACHE_DIR (~/.cache/sglang/jit by default:
# not under SGLANG_CACHE_DIR)
OWN = {"sglang": (("SGLANG_CACHE_DIR", "sglang"), ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
                  ("SGLANG_JIT_CACHE_DIR", "sglang_jit")),
       "vllm": (("VLLM_CACHE_ROOT", "vllm"),)}
_NAME = re.compile(rf"^([a-z0-9_]+)-([0-9a-f]{{{IMAGE_HEX}}})-sm(\d+)$")
_CAP = re.compile(r"^(\d+)\.(\d+)$")


def cache_vars(engine: str) -> tuple[tuple[str, str], ...]:
    """(variable, folder under CACHE_MOUNT) of every cache engine's ranks are pointed at."""
    return COMMON + OWN.get(engine, ())


def cache_env(engine: str) -> dict[str, str]:
    """{variable: path in the container} for engine's ranks."""
    return {var: f"{CACHE_MOUNT}/{sub}" for var, sub in cache_vars(engine)}


def arch_of(compute_cap: str | None) -> str | None:
    """'sm121' for nvidia-smi's compute_cap '12.1'; None when it is not such a value."""
    match = _CAP.match((compute_cap or "").strip())
    return f"sm{match.group(1)}{match.group(2)}" if match else None


def folder_name(engine: str, image_id: str, compute_cap: str | None) -> str:
    """The folder of engine's caches for an image (its ID, 'sha256:...') on a GPU (its
    compute capability): 'sglang-3dd32b7c2e5e4f01-sm121'. Unknown parts show as
    placeholders (plan --offline)."""
    image = image_id.split(":")[-1][:IMAGE_HEX] if image_id else UNKNOWN_IMAGE
    return f"{engine}-{image}-{arch_of(compute_cap) or UNKNOWN_ARCH}"


def parse_folder_name(name: str) -> tuple[str, str, str] | None:
    """(engine, image ID prefix, arch) of a folder name folder_name made, else None."""
    match = _NAME.match(name)
    return (match.group(1), match.group(2), f"sm{match.group(3)}") if match else None


def image_prefix(image_id: str) -> str:
    """What of an image ID a folder's name carries."""
    return image_id.split(":")[-1][:IMAGE_HEX]


@dataclass(frozen=True)
class CacheKey:
    """What a start's cache folders are named by: the image ID every node has (the image
    gate makes sure it is one) and each node's GPU compute capability. offline (`plan`):
    a part not known (not asked, or not answered) shows as a placeholder."""

    image_id: str = ""
    compute_caps: Mapping[str, str | None] = field(default_factory=dict)
    offline: bool = False

    def folder(self, engine: str, node: str) -> str | None:
        """The node's folder for engine, or None when its GPU's arch is not known (the
        rank then starts without the node's caches: cold)."""
        cap = self.compute_caps.get(node)
        if not self.offline and (not self.image_id or arch_of(cap) is None):
            return None
        return f"{CACHE_ROOT}/{folder_name(engine, self.image_id, cap)}"
