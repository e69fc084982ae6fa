"""The container env of an exported lane, and where it comes from: the launch spec's in the
inventory's view (computed by sparkrack/engineenv), NCCL_IB_GID_INDEX left for NCCL to pick
per node, each rank's advertised address from the downward API
(docs/kubernetes.md#per-node-roce-nccl-picks-the-gid-on-each-node).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkrack.engines import LaunchSpec
from sparkrack.export.command import kubernetes_literal
from sparkrack.export.secrets import PATH_VARIABLE

ADVERTISED = ("SGLANG_HOST_IP", "VLLM_HOST_IP")  # each rank's own fabric address
GID_INDEX = "NCCL_IB_GID_INDEX"  # per node: left to NCCL's own selection in a pod
NCCL_SELECTION = {"NCCL_IB_ROCE_VERSION_NUM": "2", "NCCL_IB_ADDR_FAMILY": "AF_INET"}
PER_NODE = (*ADVERTISED, GID_INDEX)  # what the pod finds on its node, not in the template


def export_env(spec: LaunchSpec, secret_env: Iterable[str]) -> list[dict[str, Any]]:
    """Kubernetes EnvVars for spec's container.

    Every variable of spec's env that is not a secret keeps its value (escaped for `$(VAR)`
    expansion), but the advertised address (the node's) and the GID index (NCCL's pick). A
    secret (secret_env) is not an env variable here: secrets.py mounts it as a file and
    names that file itself (the node's token file, HF_TOKEN_PATH on the rack, is not the
    pod's).
    """
    secrets = {*secret_env, *(PATH_VARIABLE[name] for name in secret_env if name in PATH_VARIABLE)}
    values = {name: value for name, value in spec.env.items() if name != GID_INDEX}
    if GID_INDEX in spec.env:
        values.update(NCCL_SELECTION)
    return [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
            if name in ADVERTISED else {"name": name, "value": kubernetes_literal(value)}
            for name, value in values.items() if name not in secrets]
