"""The node agent exported beside a lane: a DaemonSet that runs remote/capagent.py on every
GB10 node and keeps its clock-cap record (label, NoExecute taint, verdict of which boot) in
the cluster itself (docs/kubernetes.md#the-node-agent).
"""

from __future__ import annotations

from typing import Any

from sparkrack.engines import LABEL_ENGINE
from sparkrack.export.access import AGENT, labels
from sparkrack.export.cluster import ClusterOptions
from sparkrack.export.command import kubernetes_literal
from sparkrack.export.pods import GB10_PRODUCT, GPU_PRODUCT_LABEL, guaranteed
from sparkrack.inventory import Inventory
from sparkrack.inventory.schema import TORCH_LOAD
from sparkrack.remote import script, text
from sparkrack.remote.capagent import ALIVE, CHECK_MARGIN_S
from sparkrack.remote.capjudge import LOAD_RUNS
from sparkrack.remote.capnode import TAINT

MOUNT = "/opt/sparkrack-agent"
CHECK_EVERY_S = 600  # a lapsed cap is found within this (plus a burn)
BURN_SECONDS = 5  # the load's length, as `invoke burn`'s default
RESOURCES = {"cpu": "1", "memory": "4Gi"}  # python3 with torch, and the load
PRIORITY = 1_000_000_000  # the highest a PriorityClass of the cluster's own may have
ALIVE_S = LOAD_RUNS * 60 + CHECK_MARGIN_S + 120  # its longest silence: a burn that hangs


def export_agent(inventory: Inventory, image: str,
                 cluster: ClusterOptions = ClusterOptions()) -> tuple[dict[str, Any], ...]:
    """The agent's PriorityClass, ConfigMap and DaemonSet, running in image with the rack's
    clock cap."""
    priority = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": cluster.scoped(AGENT), "labels": labels(AGENT)},
                "value": PRIORITY, "preemptionPolicy": "Never", "globalDefault": False,
                "description": "sparkrack's node agent: keeps a GB10's clock-cap verdict"}
    namespaced = {"name": AGENT, **cluster.metadata(), "labels": labels(AGENT)}
    files = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(namespaced),
             "data": {"capagent.py": script("capagent"), "burn.sh": text("burn")}}
    return priority, files, _daemon_set(inventory, image, cluster, namespaced)


def _daemon_set(inventory: Inventory, image: str, cluster: ClusterOptions,
                metadata: dict[str, Any]) -> dict[str, Any]:
    agent = ["python3", f"{MOUNT}/capagent.py"]
    args = ["--node", "$(NODE_NAME)", "--namespace", "$(POD_NAMESPACE)",
            "--cap", str(inventory.vars.clock_cap_mhz), "--burn", f"{MOUNT}/burn.sh",
            "--engine-label", LABEL_ENGINE, "--every", str(CHECK_EVERY_S),
            "--", "python3", "-c", kubernetes_literal(TORCH_LOAD), str(BURN_SECONDS)]
    container = {
        "name": "agent", "image": image, "command": agent, "args": args,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_NAMESPACE",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
        "resources": guaranteed(RESOURCES),
        "securityContext": {"privileged": True},
        "livenessProbe": {"exec": {"command": [*agent, "alive", ALIVE, str(ALIVE_S)]},
                          "periodSeconds": 60, "timeoutSeconds": 30, "failureThreshold": 2},
        "volumeMounts": [{"name": "agent", "mountPath": MOUNT, "readOnly": True}],
    }
    own_taint = {"key": TAINT, "operator": "Exists", "effect": "NoExecute"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": dict(metadata),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": AGENT}},
            "template": {
                "metadata": {"labels": labels(AGENT)},
                "spec": {
                    "serviceAccountName": AGENT,
                    "runtimeClassName": cluster.runtime_class,
                    "priorityClassName": cluster.scoped(AGENT),
                    "nodeSelector": {GPU_PRODUCT_LABEL: GB10_PRODUCT},
                    "tolerations": [*(dict(t) for t in cluster.tolerations), own_taint],
                    "terminationGracePeriodSeconds": LOAD_RUNS * BURN_SECONDS + 30,
                    "containers": [container],
                    "volumes": [{"name": "agent", "configMap": {"name": AGENT,
                                                                "defaultMode": 0o555}}],
                },
            },
        },
    }
