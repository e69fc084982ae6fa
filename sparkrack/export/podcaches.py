"""The compile caches of an exported lane: each GB10 node's folder, bound into its pod.

The pods reuse what the last start compiled, as `invoke up`'s ranks do (engines/compilecaches.py),
with one difference: the runtime pulls the image by its reference, so the folder is named
by the reference's hash rather than the image ID. docs/kubernetes.md#compile-caches
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sparkrack.engines.compilecaches import CacheKey

# GB10's CUDA compute capability (NVIDIA's CUDA GPUs list); the pods run only on GB10 nodes
GB10_COMPUTE_CAP = "12.1"


def cache_key(image: str, nodes: Iterable[str]) -> CacheKey:
    """The key of an exported lane's cache folders: the image reference's hash in place of
    the image ID, every node a GB10."""
    digest = hashlib.sha256(image.encode()).hexdigest()
    return CacheKey(image_id=f"sha256:{digest}",
                    compute_caps={node: GB10_COMPUTE_CAP for node in nodes})
