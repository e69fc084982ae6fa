"""The container env of an exported lane, and where it comes from.

The env is the launch spec's in the inventory's view: what roles nccl_env and engine_env
would write on a node (the transport, the indexer budget, the allocator setting), rendered
from the inventory, plus the profile's own variables; secrets are the engine file's
`secret_env`, referenced from a Kubernetes Secret. The GID index is the inventory's: a
Kubernetes pod template cannot carry a per-node probed value (set nccl_ib_gid_index for
the cluster's nodes, or give nodes with another index their own LeaderWorkerSet).

The address a rank advertises to its peers (SGLANG_HOST_IP, VLLM_HOST_IP: its node's
roce_addr on the rack) is per node, so a pod takes its node's IP from the downward API
(`status.hostIP`): the Sparks' kubelets must register their fabric address as the node IP
(`--node-ip`), or the ranks advertise the management address and the group hangs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkrack.engines import LaunchSpec
from sparkrack.export.command import kubernetes_literal


ADVERTISED = ("SGLANG_HOST_IP", "VLLM_HOST_IP")  # each rank's own fabric address


def export_env(spec: LaunchSpec, secret_env: Iterable[str],
               secret_name: str) -> list[dict[str, Any]]:
    """Kubernetes EnvVars for spec's container.

    Every variable of spec's env that is not a secret keeps its value (escaped for `$(VAR)`
    expansion); each name of secret_env refers to the key of that name in Secret
    secret_name, optional as a node's env file carries a secret only when provisioned with it.
    A secret value is never written into the manifest.
    """
    secrets = tuple(secret_env)
    plain = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
             if name in ADVERTISED else {"name": name, "value": kubernetes_literal(value)}
             for name, value in spec.env.items() if name not in secrets]
    references = [{"name": name, "valueFrom": {"secretKeyRef": {
        "name": secret_name, "key": name, "optional": True}}} for name in secrets]
    return plain + references
