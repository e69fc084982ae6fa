"""The container env of an exported lane, and where it comes from.

Today the env is the launch spec's (`build_specs`: the NCCL variables from the inventory,
the profile's own, such as the indexer budget) and the engine file's `secret_env`. When
engine env moves to the per-node env files that provisioning writes, this module is the
one place the export learns it from.
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
    secret_name, optional as build_specs passes a secret on only when the operator has it.
    A secret value is never written into the manifest.
    """
    secrets = tuple(secret_env)
    plain = [{"name": name, "value": kubernetes_literal(value)}
             for name, value in spec.env.items() if name not in secrets]
    references = [{"name": name, "valueFrom": {"secretKeyRef": {
        "name": secret_name, "key": name, "optional": True}}} for name in secrets]
    return plain + references
