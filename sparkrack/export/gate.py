"""An engine pod's gate: its first init container runs remote/capgate.py (from the scripts'
ConfigMap, scripts.py), which lets the
engine start only on a node whose clock cap the node agent judged ok in this boot of the
node, at most capnode.FRESH_S ago (the label that placed the pod is read at scheduling
only, and survives a reboot and a dead agent).

The gate reads its Node with the GATE service account (get nodes, nothing else). The pod
mounts no token of its own (automountServiceAccountToken: false): a projected token and the
cluster's CA go to the gate container alone, so the engine never holds an API credential.
It waits up to WAIT_S for the agent; past that it exits 1 and LeaderWorkerSet recreates the
group (an init container's restart counts as the pod's).
"""

from __future__ import annotations

from typing import Any

from sparkrack.export.access import GATE
from sparkrack.export.scripts import run_script, scripts_mount
from sparkrack.remote.capnode import FRESH_S, GATE_CONTAINER
from sparkrack.remote.kubeapi import ACCOUNT

WAIT_S = 600  # the agent starts, locks and burns within this after a reboot
TOKEN_S = 3600  # the projected token's life (the kubelet renews it)
VOLUME = "gate-account"


def gate_container(image: str, resources: dict[str, Any]) -> dict[str, Any]:
    """The init container that holds the engine back until its node's cap is verified."""
    return {
        "name": GATE_CONTAINER, "image": image,
        "command": [*run_script("capgate"),
                    "--node", "$(NODE_NAME)", "--wait", str(WAIT_S), "--fresh", str(FRESH_S)],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": resources,
        "volumeMounts": [{"name": VOLUME, "mountPath": ACCOUNT, "readOnly": True},
                         scripts_mount()],
    }


def gate_pod_fields() -> dict[str, Any]:
    """What the pod spec adds for its gate: the account, no token elsewhere."""
    return {"serviceAccountName": GATE, "automountServiceAccountToken": False}


def gate_volume() -> dict[str, Any]:
    """The gate's token and the cluster's CA (the ConfigMap kube-root-ca.crt, which
    Kubernetes publishes in every namespace)."""
    return {"name": VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_S}},
        {"configMap": {"name": "kube-root-ca.crt",
                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}
