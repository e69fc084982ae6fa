"""Who may do what in an exported lane: the namespace, said in one place and labelled
privileged; RBAC no wider than the node agent and the gate need; cluster-scoped names that
two exports into two namespaces never share; and the admission policy's CEL, evaluated here
(cel-python) against the requests an agent could make: its own Node and sparkrack's keys
only."""

from __future__ import annotations

import copy
from pathlib import Path

import celpy
import pytest
import yaml

from sparkrack.export import cluster_options, export_lws, manifest_yaml
from sparkrack.inventory import load_inventory
from sparkrack.remote import capnode

INVENTORY = Path(__file__).resolve().parents[3] / "inventory" / "rack"
AGENT_USER = "system:serviceaccount:sparkrack:sparkrack-node-agent"


@pytest.fixture(scope="module")
def inventory():
    return load_inventory(INVENTORY)


def objects(inventory, namespace=None):
    cluster = cluster_options(namespace) if namespace else cluster_options()
    lane = export_lws(inventory, "sglang", "512k", cluster=cluster)
    return list(yaml.safe_load_all(manifest_yaml(lane.manifests)))


def named(items, kind, name):
    return next(o for o in items if o["kind"] == kind and o["metadata"]["name"] == name)


def test_the_namespace_is_said_once_and_everything_follows_it(inventory):
    """No --namespace: the RBAC subject used to say `default` while the ServiceAccount went
    wherever kubectl pointed; now every object and name says the one namespace."""
    items = objects(inventory)
    namespace = items[0]
    assert namespace == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "sparkrack", "labels": {"pod-security.kubernetes.io/enforce": "privileged",
                                        "app.kubernetes.io/part-of": "sparkrack"}}}
    for obj in items[1:]:
        meta = obj["metadata"]
        assert meta.get("namespace", "sparkrack") == "sparkrack"
        assert "namespace" in meta or meta["name"].endswith(".sparkrack")
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "sparkrack"
    policy = next(o for o in items if o["kind"] == "ValidatingAdmissionPolicy")
    assert f"'{AGENT_USER}'" in policy["spec"]["matchConditions"][0]["expression"]


def test_two_exports_in_two_namespaces_share_no_cluster_scoped_object(inventory):
    first, second = objects(inventory, "llm-a"), objects(inventory, "llm-b")
    scoped = {(o["kind"], o["metadata"]["name"]) for o in first if "namespace" not in
              o["metadata"]}
    assert len(scoped) == 8  # Namespace, 2 ClusterRoles and bindings, policy, binding, priority
    assert scoped.isdisjoint((o["kind"], o["metadata"]["name"]) for o in second
                             if "namespace" not in o["metadata"])


def test_each_account_has_what_it_needs_and_no_more(inventory):
    items = objects(inventory)
    rules = {(o["kind"], o["metadata"]["name"]): o["rules"] for o in items if "rules" in o}
    assert rules == {
        ("ClusterRole", "sparkrack-node-agent.sparkrack"): [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        ("Role", "sparkrack-node-agent"): [  # the engine pods on its node, in its namespace
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        ("ClusterRole", "sparkrack-gate.sparkrack"): [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}
    for kind, name in (("ClusterRoleBinding", "sparkrack-node-agent.sparkrack"),
                       ("RoleBinding", "sparkrack-node-agent"),
                       ("ClusterRoleBinding", "sparkrack-gate.sparkrack")):
        binding = named(items, kind, name)
        account = name.split(".")[0]
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                        "namespace": "sparkrack"}]


# --- the admission policy, evaluated ------------------------------------------------------

NODE = {"metadata": {"name": "gb10-3", "labels": {"nvidia.com/gpu.product": "NVIDIA-GB10",
                                                   capnode.LABEL: "true"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                             "effect": "NoSchedule"}]}}
MINE = {"key": capnode.TAINT, "value": "uncapped", "effect": "NoExecute"}


def changed(edit):
    node = copy.deepcopy(NODE)
    edit(node)
    return node


def admit(policy, new, old=NODE, user=AGENT_USER, node_name=("gb10-3",)):
    """The messages of the validations that deny the update of old to new by user, whose
    token names node_name; None when the policy does not apply."""
    env = celpy.Environment()
    extra = {"authentication.kubernetes.io/node-name": list(node_name)} if node_name else {}
    activation = celpy.json_to_cel({"request": {"userInfo": {"username": user, "extra": extra}},
                                    "object": new, "oldObject": old})

    def holds(expression):  # an evaluation error (a CELEvalError) denies, as failurePolicy Fail
        result = env.program(env.compile(expression)).evaluate(activation)
        return isinstance(result, celpy.celtypes.BoolType) and bool(result)

    spec = policy["spec"]
    if not all(holds(c["expression"]) for c in spec["matchConditions"]):
        return None
    return [v["message"] for v in spec["validations"] if not holds(v["expression"])]


def verdict(node):
    node["metadata"]["labels"].pop(capnode.LABEL)
    node["metadata"]["annotations"].update({name: "x" for name in capnode.ANNOTATIONS})
    node["spec"]["taints"].append(dict(MINE))


@pytest.mark.parametrize("new, extra, denied", [
    (changed(verdict), ("gb10-3",), []),
    (NODE, ("gb10-3",), []),  # a patch that changes nothing
    (changed(lambda n: n["spec"]["taints"].insert(0, dict(MINE))), ("gb10-3",), []),
    (changed(verdict), ("gb10-4",), ["only the Node its pod runs on"]),
    (changed(verdict), (), ["only the Node its pod runs on"]),  # a token before Kubernetes 1.30
    (changed(lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.product": "X"})),
     ("gb10-3",), ["only the label sparkrack.io/clock-cap-verified"]),
    (changed(lambda n: n["metadata"]["labels"].pop("nvidia.com/gpu.product")), ("gb10-3",),
     ["only the label"]),
    (changed(lambda n: n["metadata"]["annotations"].update({"other": "x"})), ("gb10-3",),
     ["only the annotations"]),
    (changed(lambda n: n["spec"].update(taints=[dict(MINE)])), ("gb10-3",),
     ["only the taint sparkrack.io/clock-cap-unverified"]),
    (changed(lambda n: n["spec"]["taints"].append({"key": "x", "effect": "NoExecute"})),
     ("gb10-3",), ["only the taint"]),
    (changed(lambda n: n["spec"].update(unschedulable=True)), ("gb10-3",), ["unschedulable"]),
    (changed(lambda n: n["metadata"].update(finalizers=["x"])), ("gb10-3",), ["finalizers"]),
    # issue 53 item 3: each of these was let through
    (changed(lambda n: n["spec"].update(providerID="aws:///us-east-1a/i-0abc")), ("gb10-3",),
     ["providerID, podCIDR"]),
    (changed(lambda n: n["spec"].update(podCIDR="10.244.9.0/24")), ("gb10-3",), ["podCIDR"]),
    (changed(lambda n: n["spec"].update(podCIDRs=["10.244.9.0/24", "fd00::/64"])),
     ("gb10-3",), ["podCIDRs"]),
    (changed(lambda n: n["spec"].update(configSource={"configMap": {
        "name": "evil", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}})),
     ("gb10-3",), ["configSource"]),
    (changed(lambda n: n["spec"].update(externalID="x")), ("gb10-3",), ["externalID"]),
])
def test_the_policy_lets_the_agent_change_only_its_node_and_its_keys(inventory, new, extra,
                                                                      denied):
    policy = next(o for o in objects(inventory) if o["kind"] == "ValidatingAdmissionPolicy")
    messages = admit(policy, new, node_name=extra)
    assert len(messages) == len(denied)
    for message, words in zip(messages, denied, strict=False):
        assert words in message


def test_the_agent_may_leave_a_set_spec_field_as_it_is_but_not_clear_it(inventory):
    policy = next(o for o in objects(inventory) if o["kind"] == "ValidatingAdmissionPolicy")
    placed = changed(lambda n: n["spec"].update(providerID="kind://docker/x/gb10-3",
                                                podCIDR="10.244.3.0/24",
                                                podCIDRs=["10.244.3.0/24"]))
    assert admit(policy, changed(verdict), old=placed) == ["the node agent may not change a "
                                                          "Node's providerID, podCIDR, podCIDRs, "
                                                          "configSource, externalID"]
    mine = copy.deepcopy(placed)
    verdict(mine)
    assert admit(policy, mine, old=placed) == []


def test_the_policy_leaves_everyone_else_alone(inventory):
    items = objects(inventory)
    policy = next(o for o in items if o["kind"] == "ValidatingAdmissionPolicy")
    other = changed(lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.product": "X"}))
    assert admit(policy, other, user="system:node:gb10-3") is None
    assert admit(policy, other, user="system:serviceaccount:llm-b:sparkrack-node-agent") is None
    binding = next(o for o in items if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
        "resources": ["nodes"]}]
