"""`invoke export`: an engine lane as Kubernetes manifests (a LeaderWorkerSet and its
leader's Service); contacts nothing.

Exit codes as `invoke check`: 1 when the rules refuse the profile, 2 for a usage or
inventory error.
"""

from invoke import task

from .. import console
from ..errors import UsageError
from .common import INVENTORY_HELP, inventory_from, operator_task
from .engine_tasks import DEFAULT_PROFILE

FORMATS = ("lws",)


@task(help={"engine": "sglang or vllm (a profile: the inventory's overrides, else shipped)",
            "profile": f"profile name (default: {DEFAULT_PROFILE})",
            "format": "lws: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) and a Service",
            "out": "write one YAML file per object into this directory (default: stdout)",
            "name": "the LeaderWorkerSet's name (default: sparkrack-ENGINE-PROFILE)",
            "secret": "the Secret holding HF_TOKEN (default: sparkrack-ENGINE)",
            "rdma_resource": "the RDMA device plugin's resource (default: "
                             "rdma/hca_shared_devices_a)",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def export(c, engine, profile=DEFAULT_PROFILE, format_="lws", out=None, name=None, secret=None,
           rdma_resource=None, inventory=None, json=False):
    """Print (or write) Kubernetes manifests that run an engine lane as `up` would.

    Refused when `invoke check` refuses the profile. Pods run only on GB10 nodes labelled
    sparkrack.io/clock-cap-verified=true; secrets come from a Secret, never inline."""
    if format_ not in FORMATS:
        raise UsageError(f"unknown export format '{format_}'", fix="formats: " + ", ".join(FORMATS))
    from pathlib import Path

    from ..export import (CAP_VERIFIED_LABEL, DEFAULT_RDMA_RESOURCE, GB10_PRODUCT,
                          GPU_PRODUCT_LABEL, export_lws, manifest_yaml, write_manifests)

    lane = export_lws(inventory_from(inventory), engine, profile, name=name, secret_name=secret,
                      rdma_resource=rdma_resource or DEFAULT_RDMA_RESOURCE)
    report = lane.report
    for finding in report.findings:
        waived = f" [waived: {finding.waiver_reason}]" if finding.waived else ""
        console.say(f"{finding.severity}: {finding.rule}: {finding.message}{waived}")
    console.say(f"flags checked against {report.checked_against}")
    for note in report.notes:
        console.say(f"note: {note}")
    if out:
        paths = [str(path) for path in write_manifests(lane.objects, Path(out))]
        if json:
            console.print_json({"wrote": paths})
        else:
            for path in paths:
                print(f"wrote {path}")
    elif json:
        console.print_json({"apiVersion": "v1", "kind": "List", "items": list(lane.objects)})
    else:
        print(manifest_yaml(lane.objects), end="")
    if lane.secret_keys:
        literals = " ".join(f"--from-literal={key}=..." for key in lane.secret_keys)
        console.say(f"secrets: {', '.join(lane.secret_keys)} from Secret {lane.secret_name} "
                    f"(not exported; kubectl create secret generic {lane.secret_name} {literals})")
    console.say(f"nodes: only those labelled {GPU_PRODUCT_LABEL}={GB10_PRODUCT} and "
                f"{CAP_VERIFIED_LABEL}=true (set after `invoke burn` says ok)")
