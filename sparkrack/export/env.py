"""The container env of an exported lane, and where it comes from.

The env is the launch spec's in the inventory's view: what roles nccl_env and engine_env
would write on a node (the transport, the indexer budget, the allocator setting), rendered
from the inventory, plus the profile's own variables; secrets are the engine file's
`secret_env`, referenced from a Kubernetes Secret. The GID index is the inventory's: a
Kubernetes pod template cannot carry a per-node probed value (set nccl_ib_gid_index for
the cluster's nodes, or give nodes with another index their own LeaderWorkerSet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkrack.engines import LaunchSpec
from sparkrack.export.command import kubernetes_literal


def export_env(spec: LaunchSpec, secret_env: Iterable[str],
               secret_name: str) -> list[dict[str, Any]]:
    """Kubernetes EnvVars for spec's container.

    Every variable of spec's env that is not a secret keeps its value (escaped for `$(VAR)`
    expansion); each name of secret_env refers to the key of that name in Secret
    secret_name, optional as a node's env file carries a secret only when provisioned with it.
    A secret value is never written into the manifest.
    """
    secrets = tuple(secret_env)
    plain = [{"name": name, "value": kubernetes_literal(value)}
             for name, value in spec.env.items() if name not in secrets]
    references = [{"name": name, "valueFrom": {"secretKeyRef": {
        "name": secret_name, "key": name, "optional": True}}} for name in secrets]
    return plain + references
