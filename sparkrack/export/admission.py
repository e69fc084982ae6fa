"""The admission policy that narrows the node agent's `patch nodes` to its own node and to
sparkrack's own keys (a ValidatingAdmissionPolicy and its binding,
admissionregistration.k8s.io/v1: Kubernetes 1.30 or later).

Only requests of the agent's service account are matched. The Node it changes must be the
one its pod runs on: a token bound to a pod carries its node's name in the request's user
info (`authentication.kubernetes.io/node-name`, Kubernetes 1.30 or later), as Kubernetes'
own per-node policy example compares it. Against the Node as it was, only LABEL, the
ANNOTATIONS and TAINT (capnode.py) may change; every other label, annotation and taint,
the finalizers, owners and the rest of the spec (`unschedulable`, SPEC_KEPT) must stay as
they are. A token without the node
name is refused: on an older cluster the agent's writes fail closed, and no engine pod is
ever admitted.
"""

from __future__ import annotations

from typing import Any

from sparkrack.export.access import AGENT, labels
from sparkrack.export.cluster import ClusterOptions
from sparkrack.remote.capnode import ANNOTATIONS, LABEL, TAINT

API = "admissionregistration.k8s.io/v1"
NODE_NAME = "authentication.kubernetes.io/node-name"


def _kept(field: str, allowed: str) -> str:
    """CEL: the map object.metadata.FIELD and oldObject's agree on every key but allowed."""
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    return (f"(!has({new}) || {new}.all(k, k in {allowed} || (has({old}) && k in {old} && "
            f"{old}[k] == {new}[k]))) && (!has({old}) || {old}.all(k, k in {allowed} || "
            f"(has({new}) && k in {new})))")


def _same(path: str) -> str:
    """CEL: object.PATH and oldObject.PATH are both unset or equal."""
    new, old = f"object.{path}", f"oldObject.{path}"
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


# the rest of a Node's spec (the v1 NodeSpec): where the cloud provider, the pod network
# and the kubelet's configuration come from
SPEC_KEPT = ("providerID", "podCIDR", "podCIDRs", "configSource", "externalID")
TAINTS_KEPT = (
    f"(!has(object.spec.taints) || object.spec.taints.all(t, t.key == '{TAINT}' || "
    f"(has(oldObject.spec.taints) && t in oldObject.spec.taints))) && "
    f"(!has(oldObject.spec.taints) || oldObject.spec.taints.all(t, t.key == '{TAINT}' || "
    f"(has(object.spec.taints) && t in object.spec.taints)))")
VALIDATIONS = (
    (f"'{NODE_NAME}' in request.userInfo.extra && "
     f"request.userInfo.extra['{NODE_NAME}'] == [object.metadata.name]",
     f"the node agent may change only the Node its pod runs on (its token's {NODE_NAME}, "
     "Kubernetes 1.30 or later)"),
    (_kept("labels", f"['{LABEL}']"), f"the node agent may change only the label {LABEL}"),
    (_kept("annotations", str(list(ANNOTATIONS))),
     f"the node agent may change only the annotations {', '.join(ANNOTATIONS)}"),
    (TAINTS_KEPT, f"the node agent may add or remove only the taint {TAINT}"),
    (" && ".join(_same(path) for path in ("metadata.finalizers", "metadata.ownerReferences",
                                          "spec.unschedulable")),
     "the node agent may not change a Node's finalizers, owners or unschedulable"),
    (" && ".join(_same(f"spec.{field}") for field in SPEC_KEPT),
     f"the node agent may not change a Node's {', '.join(SPEC_KEPT)}"),
)


def username(cluster: ClusterOptions) -> str:
    return f"system:serviceaccount:{cluster.namespace}:{AGENT}"


def export_admission(cluster: ClusterOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny)."""
    name = cluster.scoped(AGENT)
    policy = {
        "apiVersion": API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels(AGENT)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": ["nodes"]}]},
            "matchConditions": [{"name": "the-node-agent",
                                 "expression": f"request.userInfo.username == "
                                               f"'{username(cluster)}'"}],
            "validations": [{"expression": expression, "message": message}
                            for expression, message in VALIDATIONS],
        },
    }
    binding = {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": labels(AGENT)},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return policy, binding
