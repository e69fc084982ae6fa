"""`invoke export`: an engine lane as Kubernetes manifests (a LeaderWorkerSet and its
leader's Service); contacts nothing.

Exit codes as `invoke check`: 1 when the rules refuse the profile, 2 for a usage or
inventory error.
"""

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.cli.serve_tasks import DEFAULT_PROFILE
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = None

FORMATS = ("lws",)


@task(help={"engine": "sglang or vllm (a profile: the inventory's overrides, else shipped)",
            "profile": f"profile name (default: {DEFAULT_PROFILE})",
            "format": "lws: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), a Service and "
                      "the node agent",
            "out": "write one YAML file per object and a kustomization.yaml into this "
                   "directory (default: stdout)",
            "name": "the LeaderWorkerSet's name (default: sparkrack-ENGINE-PROFILE)",
            "secret": "the Secret holding HF_TOKEN (default: sparkrack-ENGINE)",
            "namespace": "the lane's own namespace, exported labelled privileged (default: "
                         "sparkrack)",
            "toleration": "KEY[=VALUE][:EFFECT] of a taint the GB10 nodes carry (repeatable)",
            "priority_class": "the PriorityClass of the engine pods",
            "rdma_resource": "the RDMA device plugin's resource (default: "
                             "rdma/hca_shared_devices_a)",
            "runtime_class": "the RuntimeClass of NVIDIA's container runtime, for the node "
                             "agent (default: nvidia)",
            "prometheus_operator": "add a PodMonitor of the leader's metrics and a "
                                   "PrometheusRule of the engine alerts "
                                   "(monitoring.coreos.com/v1)",
            "monitor_label": "KEY=VALUE the operator's Prometheus selects monitors and rules "
                             "by, e.g. release=kube-prometheus-stack (repeatable)",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts"},
      iterable=["toleration", "monitor_label"])
@operator_task
def export(c, engine, profile=DEFAULT_PROFILE, format_="lws", out=None, name=None, secret=None,
           namespace=None, toleration=None, priority_class=None, rdma_resource=None,
           runtime_class=None, prometheus_operator=False, monitor_label=None, inventory=None,
           json=False):
    """Print (or write) Kubernetes manifests that run a lane as `up` would.

    Refused when `invoke check` refuses the profile. Pods run only on GB10 nodes labelled
    sparkrack.io/clock-cap-verified=true, which the exported node agent keeps only while
    the node's clock cap is proven, and start only past a gate that wants an ok of the
    node's current boot; secrets come from a Secret as files, never inline."""
    if format_ not in FORMATS:
        raise UsageError(f"unknown export format '{format_}'", fix="formats: " + ", ".join(FORMATS))
    from pathlib import Path

    from sparkrack.export import (
        CAP_VERIFIED_LABEL,
        GB10_PRODUCT,
        GPU_PRODUCT_LABEL,
        cluster_options,
        export_lws,
        manifest_yaml,
        write_manifests,
    )
    from sparkrack.export.monitors import monitor_labels

    cluster = cluster_options(namespace, toleration or (), priority_class, rdma_resource,
                              runtime_class)
    if monitor_label and not prometheus_operator:
        raise UsageError("--monitor-label labels the PodMonitor and PrometheusRule, which only "
                         "--prometheus-operator exports", fix="add --prometheus-operator")
    monitors = monitor_labels(monitor_label or ()) if prometheus_operator else None
    lane = export_lws(inventory_from(inventory), engine, profile, name=name, secret_name=secret,
                      cluster=cluster, monitors=monitors)
    report = lane.report
    for finding in report.findings:
        waived = f" [waived: {finding.waiver_reason}]" if finding.waived else ""
        console.say(f"{finding.severity}: {finding.rule}: {finding.message}{waived}")
    console.say(f"flags checked against {report.checked_against}")
    for note in report.notes:
        console.say(f"note: {note}")
    if out:
        paths = [str(path) for path in write_manifests(lane.manifests, Path(out))]
        if json:
            console.print_json({"wrote": paths})
        else:
            for path in paths:
                print(f"wrote {path}")
    elif json:
        console.print_json({"apiVersion": "v1", "kind": "List", "items": list(lane.manifests)})
    else:
        print(manifest_yaml(lane.manifests), end="")
    if lane.secret_keys:
        literals = " ".join(f"--from-literal={key}=..." for key in lane.secret_keys)
        need = ("required: the pods do not start without it (hf_token_required)"
                if lane.secret_required else "optional")
        console.say(f"secrets: {', '.join(lane.secret_keys)} from Secret {lane.secret_name}, "
                    f"{need}, mounted as read-only files (not exported; kubectl create secret "
                    f"generic --namespace {lane.namespace} {lane.secret_name} {literals})")
    console.say(f"nodes: only those labelled {GPU_PRODUCT_LABEL}={GB10_PRODUCT} and "
                f"{CAP_VERIFIED_LABEL}=true, and an engine starts only once its node's agent "
                "judged the cap ok in the node's current boot (the agent taints the node "
                "NoExecute on any other verdict)")
