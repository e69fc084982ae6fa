"""The container env of an exported lane, and where it comes from.

The env is the launch spec's in the inventory's view: what roles nccl_env and engine_env
would write on a node (the transport, the indexer budget, the allocator setting), rendered
from the inventory, plus the profile's own variables; the engine file's `secret_env` is
never among them (secrets.py: files of a Secret volume).

The RoCE GID index is per node (firmware renumbers it), and one pod template cannot carry
a value probed per node: the pods leave NCCL_IB_GID_INDEX unset and NCCL picks, on the node
it runs on, the RoCE v2 GID of an IPv4 address (its own selection since NCCL 2.21, pinned
here with NCCL_IB_ROCE_VERSION_NUM=2 and NCCL_IB_ADDR_FAMILY=AF_INET; the images' NCCL is
newer: docs/kubernetes.md says which). Nodes that differ only in their GID index share
one LeaderWorkerSet.

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
