"""Who may do what in an exported lane: its Namespace, the service accounts and their RBAC.

- The Namespace is labelled `pod-security.kubernetes.io/enforce: privileged`: the engine
  pods take host networking, a hostPath and IPC_LOCK and the node agent is privileged, all
  of which the Pod Security Standards' baseline (a common default) refuses.
- The node agent (AGENT) may get and patch Nodes (a ClusterRole: RBAC cannot narrow it to
  its own node; admission.py's policy does) and list the pods of its namespace (a Role: it
  looks for the engine on its node).
- An engine pod's gate (GATE) may get Nodes and nothing else; only the gate container gets
  its token (gate.py), never the engine.

Cluster-scoped names end in the namespace (ClusterOptions.scoped).
"""

from __future__ import annotations

from typing import Any

from sparkrack.export.cluster import ClusterOptions

AGENT = "sparkrack-node-agent"
GATE = "sparkrack-gate"
PART_OF = {"app.kubernetes.io/part-of": "sparkrack"}
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "privileged"}
RBAC = "rbac.authorization.k8s.io/v1"


def export_access(cluster: ClusterOptions) -> tuple[dict[str, Any], ...]:
    """The Namespace, then each account with its roles and bindings."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": cluster.namespace,
                              "labels": {**POD_SECURITY, **PART_OF}}}
    return (namespace,
            *_account(cluster, AGENT, [_rule("nodes", "get", "patch")],
                      [_rule("pods", "list")]),
            *_account(cluster, GATE, [_rule("nodes", "get")], []))


def labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, **PART_OF}


def _rule(resource: str, *verbs: str) -> dict[str, Any]:
    return {"apiGroups": [""], "resources": [resource], "verbs": list(verbs)}


def _account(cluster: ClusterOptions, name: str, cluster_rules: list[dict[str, Any]],
             rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ServiceAccount name, its ClusterRole and binding, and its Role and binding when
    rules are given."""
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": cluster.namespace}]
    own = {"name": name, **cluster.metadata(), "labels": labels(name)}
    scoped = {"name": cluster.scoped(name), "labels": labels(name)}
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(own)},
               {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": dict(scoped),
                "rules": cluster_rules},
               {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": dict(scoped),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": cluster.scoped(name)}, "subjects": subject}]
    if rules:
        objects += [{"apiVersion": RBAC, "kind": "Role", "metadata": dict(own), "rules": rules},
                    {"apiVersion": RBAC, "kind": "RoleBinding", "metadata": dict(own),
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": name}, "subjects": subject}]
    return objects
