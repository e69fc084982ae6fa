"""The node agent exported beside a lane: what keeps CAP_VERIFIED_LABEL true on a GB10 node
only while its clock cap is proven, in the cluster itself.

A DaemonSet on every GB10 node runs remote/capagent.py (composed with the judge,
remote/capjudge.py) and remote/burn.sh from a ConfigMap, in the lane's engine image
(python3, and torch for the burn's load): it locks the clock as role clock_cap's unit does
at boot, burns and judges as `invoke burn` does, and sets the label only on ok (removed on
any other verdict, at start and when it ends). It sees the GPU through NVIDIA's runtime
without taking it (NVIDIA_VISIBLE_DEVICES=all, the RuntimeClass, no nvidia.com/gpu
request: the engine pod keeps the node's one GPU), privileged for `nvidia-smi -lgc`. Its
ServiceAccount may get and patch nodes, nothing else (a ClusterRole: Kubernetes' RBAC
cannot narrow it to the agent's own node).
"""

from __future__ import annotations

from typing import Any

from sparkrack.export.cluster import ClusterOptions
from sparkrack.export.command import kubernetes_literal
from sparkrack.export.pods import (
    CAP_VERIFIED_LABEL, GB10_PRODUCT, GPU_PRODUCT_LABEL, guaranteed)
from sparkrack.inventory import Inventory
from sparkrack.inventory.schema import TORCH_LOAD
from sparkrack.remote import script, text
from sparkrack.remote.capjudge import LOAD_RUNS

NAME = "sparkrack-node-agent"
MOUNT = "/opt/sparkrack-agent"
CHECK_EVERY_S = 600  # a lapsed cap is found within this (plus a burn)
BURN_SECONDS = 5  # the load's length, as `invoke burn`'s default
RESOURCES = {"cpu": "1", "memory": "4Gi"}  # python3 with torch, and the load
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "sparkrack"}


def export_agent(inventory: Inventory, image: str,
                 cluster: ClusterOptions = ClusterOptions()) -> tuple[dict[str, Any], ...]:
    """The agent's ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap and
    DaemonSet, running in image with the rack's clock cap."""
    namespaced = {"name": NAME, **cluster.metadata(), "labels": dict(LABELS)}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(namespaced)}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": dict(LABELS)},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": NAME, "labels": dict(LABELS)},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": NAME},
               "subjects": [{"kind": "ServiceAccount", "name": NAME,
                             "namespace": cluster.namespace or "default"}]}
    files = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(namespaced),
             "data": {"capagent.py": script("capagent"), "burn.sh": text("burn")}}
    return account, role, binding, files, _daemon_set(inventory, image, cluster, namespaced)


def _daemon_set(inventory: Inventory, image: str, cluster: ClusterOptions,
                metadata: dict[str, Any]) -> dict[str, Any]:
    args = ["--node", "$(NODE_NAME)", "--cap", str(inventory.vars.clock_cap_mhz),
            "--label", CAP_VERIFIED_LABEL, "--burn", f"{MOUNT}/burn.sh",
            "--every", str(CHECK_EVERY_S), "--", "python3", "-c", kubernetes_literal(TORCH_LOAD),
            str(BURN_SECONDS)]
    container = {
        "name": "agent", "image": image, "command": ["python3", f"{MOUNT}/capagent.py"],
        "args": args,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
        "resources": guaranteed(RESOURCES),
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "agent", "mountPath": MOUNT, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": dict(metadata),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": NAME,
                    "runtimeClassName": cluster.runtime_class,
                    "nodeSelector": {GPU_PRODUCT_LABEL: GB10_PRODUCT},
                    **({"tolerations": [dict(t) for t in cluster.tolerations]}
                       if cluster.tolerations else {}),
                    "terminationGracePeriodSeconds": LOAD_RUNS * BURN_SECONDS + 30,
                    "containers": [container],
                    "volumes": [{"name": "agent", "configMap": {"name": NAME,
                                                                "defaultMode": 0o555}}],
                },
            },
        },
    }
