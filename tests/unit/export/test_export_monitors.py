"""`invoke export`: the pods' scripts in one ConfigMap, and, with --prometheus-operator, a
PodMonitor of the leader and a PrometheusRule of the engine alerts that validate against
prometheus-operator's own CRDs (vendored in tests/unit/data/prometheus-operator/), select the
pods the lane's Service selects, and carry rules promtool accepts."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from hosttools import need
from test_export import (
    INVENTORY,
    containers,
    everything,
    run_export,
    strict,
    validate,
)

from sparkrack.core.errors import UsageError
from sparkrack.export import export_lws
from sparkrack.export.monitors import monitor_labels
from sparkrack.inventory import load_inventory
from sparkrack.remote import script

CRDS = Path(__file__).parents[1] / "data" / "prometheus-operator"
LEADER = {"leaderworkerset.sigs.k8s.io/name": "sparkrack-sglang-512k",
          "leaderworkerset.sigs.k8s.io/worker-index": "0"}


@functools.cache
def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    """A validator for the CRD's v1 openAPIV3Schema, unknown fields refused."""
    crd = yaml.safe_load((CRDS / f"monitoring.coreos.com_{kind.lower()}s.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(python_patterns(version["schema"]["openAPIV3Schema"]))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def python_patterns(schema):
    """The schema with its patterns (Go's RE2, as the API server reads them) in Python's
    syntax: RE2 takes a flag group after `^` (`^(?i)(abort|warn)?$`), Python only at the
    start, where it means the same."""
    if isinstance(schema, dict):
        result = {key: python_patterns(value) for key, value in schema.items()}
        if isinstance(schema.get("pattern"), str) and schema["pattern"].startswith("^(?i)"):
            result["pattern"] = "(?i)^" + schema["pattern"][len("^(?i)"):]
        return result
    if isinstance(schema, list):
        return [python_patterns(item) for item in schema]
    return schema


@pytest.fixture(scope="module")
def inventory():
    return load_inventory(INVENTORY)


def by_kind(objects, kind):
    return [obj for obj in objects if obj["kind"] == kind]


def test_the_vendored_crds_are_the_ones_their_source_note_names():
    note = (CRDS / "SOURCE.md").read_text()
    for path in sorted(CRDS.glob("*.yaml")):
        assert f"`{path.name}`: sha256 `{hashlib.sha256(path.read_bytes()).hexdigest()}`" in note
    assert "Apache License" in (CRDS / "LICENSE").read_text()


def test_the_pods_scripts_are_one_configmap_not_inlined(inventory):
    """The gate's script (13 KB) was inlined into the command of the leader's and the
    workers' gate containers; now both run it from one ConfigMap, with the leader wait."""
    objects = everything(inventory, "sglang", "512k")
    [scripts] = [o for o in by_kind(objects, "ConfigMap")
                 if o["metadata"]["name"] == "sparkrack-engine-scripts"]
    assert scripts["data"] == {"capgate.py": script("capgate"), "leader.py": script("leader")}
    validate(scripts)
    [lws] = by_kind(objects, "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        pod = template["spec"]
        for container in pod["initContainers"] + pod["containers"]:
            longest = max(len(word) for word in container["command"] + container.get("args", []))
            assert longest < 2000, (container["name"], longest)  # no script as a word
        assert {"name": "sparkrack-scripts", "configMap": {
            "name": "sparkrack-engine-scripts", "defaultMode": 0o444}} in pod["volumes"]
    assert len(yaml.safe_dump(lws)) < 20_000


def test_without_the_flag_nothing_of_prometheus_operator_is_exported(inventory):
    kinds = {o["kind"] for o in everything(inventory, "sglang", "512k")}
    assert not kinds & {"PodMonitor", "PrometheusRule", "ServiceMonitor"}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_podmonitor_scrapes_the_leader_and_validates(inventory, engine):
    objects = everything(inventory, engine, "512k",
                         monitors={"release": "kube-prometheus-stack"})
    [monitor] = by_kind(objects, "PodMonitor")
    crd_validator("PodMonitor").validate(monitor)
    [service] = by_kind(objects, "Service")
    selector = service["spec"]["selector"]
    assert monitor["spec"]["selector"] == {"matchLabels": selector}
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    leader, _ = containers(by_kind(objects, "LeaderWorkerSet")[0])
    assert endpoint["port"] in {port["name"] for port in leader["ports"]}
    assert (endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
        "/metrics", "5s", "4s")  # as monitoring.render's sparkrack-engine job
    assert {"action": "replace", "targetLabel": "rack",
            "replacement": inventory.vars.rack_name} in endpoint["relabelings"]  # as render's
    misspelt = {**monitor, "spec": {**monitor["spec"], "podMetricEndpoints": []}}
    with pytest.raises(jsonschema.ValidationError, match="podMetricEndpoints"):
        crd_validator("PodMonitor").validate(misspelt)  # the schema refuses what it lacks


def test_the_prometheusrule_carries_the_engine_alerts_and_promtool_takes_them(inventory,
                                                                              tmp_path):
    objects = everything(inventory, "sglang", "512k", monitors={})
    [rule] = by_kind(objects, "PrometheusRule")
    crd_validator("PrometheusRule").validate(rule)
    groups = rule["spec"]["groups"]
    names = {r["alert"] for group in groups for r in group["rules"]}
    assert names == {"SparkrackTtftHigh", "SparkrackInterTokenLatencyHigh"}
    assert not any("sparkrack_" in str(r["expr"]) for group in groups for r in group["rules"])
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    done = subprocess.run([need("promtool"), "check", "rules", "rules.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_monitor_label_must_be_a_label_and_needs_the_flag(capsys):
    assert monitor_labels(["release=kps", "team=ml"]) == {"release": "kps", "team": "ml"}
    for bad in ("release", "=x", "rel ease=x", "release=a b"):
        with pytest.raises(UsageError, match="is not a label KEY=VALUE"):
            monitor_labels([bad])
    assert run_export("--engine", "sglang", "-i", str(INVENTORY),
                      "--monitor-label", "release=kps") == 2
    assert "only --prometheus-operator exports" in capsys.readouterr().err
    assert run_export("--engine", "sglang", "-i", str(INVENTORY), "--prometheus-operator",
                      "--monitor-label", "release=kps") == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents][-2:] == ["PodMonitor", "PrometheusRule"]
    assert all(d["metadata"]["labels"]["release"] == "kps" for d in documents[-2:])


def test_export_lws_takes_the_labels_as_given(inventory):
    lane = export_lws(inventory, "vllm", "512k", monitors={"release": "x"})
    assert [o["kind"] for o in lane.objects] == ["LeaderWorkerSet", "Service", "PodMonitor",
                                                 "PrometheusRule"]
