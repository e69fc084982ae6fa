"""`export_lws`: an engine lane as a LeaderWorkerSet and a Service for its leader's API.

The lane is what `invoke plan` would start (its profile file read once: engines/lane.py),
checked as `invoke check` checks it: the same rules (`check_lane`) refuse the same profiles,
and the pods run the same launch specs' argv and env. One LWS group is the TP group: size = the number of ranks, the leader is rank 0 (it
serves the API and hosts the rendezvous), the workers are the other ranks, and the group is
recreated as a whole when one of its pods restarts (RecreateGroupOnPodRestart), as
`invoke watch` stops or restarts the whole group when one rank is lost. Beside them: the
namespace and accounts (access.py), the pods' scripts (scripts.py), the node agent
(agent.py) and its admission policy (admission.py); for prometheus-operator users, a
PodMonitor and a PrometheusRule (monitors.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.engines import (
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_PROFILE,
    LABEL_SPEC_HASH,
    LaunchSpec,
    lane_specs,
    resolve_lane,
    template_values,
)
from sparkrack.export.access import export_access
from sparkrack.export.admission import export_admission
from sparkrack.export.agent import export_agent
from sparkrack.export.cluster import ClusterOptions
from sparkrack.export.command import group_argv
from sparkrack.export.env import PER_NODE, export_env
from sparkrack.export.monitors import export_monitors
from sparkrack.export.podcaches import cache_key
from sparkrack.export.pods import pod_template
from sparkrack.export.scripts import scripts_config_map
from sparkrack.export.secrets import secret_files
from sparkrack.inventory import Inventory
from sparkrack.rules import CheckReport, check_lane

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
ANNOTATION_ENGINE_VERSION = "sparkrack.engine-version"  # the option table the flags passed
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # LWS sets both on every pod of a group
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0": the leader
RESTART_POLICY = "RecreateGroupOnPodRestart"
SERVICE_SUFFIX = "-api"  # LWS itself makes a headless Service named after the LWS
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class ProfileRefused(SparkrackError):
    """The rules refuse the profile, as `invoke check` does (exit code 1)."""

    def __init__(self, report: CheckReport):
        self.report = report
        reasons = "; ".join(f"{f.rule}: {f.message} ({f.where(report.node_count) or 'rack'})"
                            for f in report.blocking)
        super().__init__(f"refused: {report.summary()}: {reasons}")


@dataclass(frozen=True)
class LwsExport:
    """The manifests of one lane and what the operator should know about them."""

    name: str  # of the LeaderWorkerSet
    objects: tuple[dict[str, Any], ...]  # the LeaderWorkerSet, the leader's Service (monitors)
    support: tuple[dict[str, Any], ...]  # namespace, accounts, admission policy, node agent
    report: CheckReport  # the rules' findings: none blocking, warnings possible
    secret_name: str  # the Secret the pods read secret_keys from (not exported)
    secret_keys: tuple[str, ...]
    namespace: str
    secret_required: bool = False  # the pods do not start without the Secret

    @property
    def manifests(self) -> tuple[dict[str, Any], ...]:
        """Every object, the lane's last: what `kubectl apply -k` takes."""
        return (*self.support, *self.objects)


def default_name(engine: str, profile: str) -> str:
    """The LeaderWorkerSet's name unless one is given: sparkrack-<engine>-<profile>."""
    return f"sparkrack-{engine}-{profile}"


def default_secret_name(engine: str) -> str:
    """The Secret holding an engine's secret env (as its env file on a node does)."""
    return f"sparkrack-{engine}"


def export_lws(inventory: Inventory, engine: str, profile: str, *, name: str | None = None,
               secret_name: str | None = None, cluster: ClusterOptions = ClusterOptions(),
               monitors: dict[str, str] | None = None) -> LwsExport:
    """The LeaderWorkerSet and leader Service that run engine's profile like `invoke up`;
    with monitors (the labels they carry), a PodMonitor and a PrometheusRule too.

    ProfileRefused when the rules block the profile; UsageError for a bad name, or when the
    ranks differ in more than their rank (a per-node env value, say), which one worker
    template cannot express. Contacts nothing; secrets come only from Secret secret_name.
    """
    lane = resolve_lane(inventory, engine, profile)
    report = check_lane(inventory, lane)
    if report.blocking:
        raise ProfileRefused(report)
    name = _checked_name(name or default_name(engine, profile), "--name")
    secret_name = _checked_name(secret_name or default_secret_name(engine), "--secret")
    definition = lane.definition
    specs = lane_specs(inventory, lane)
    specs = lane_specs(inventory, lane, cache=cache_key(specs[0].image, (s.node for s in specs)))
    if len(specs) < 2:
        raise UsageError(f"a LeaderWorkerSet needs a leader and a worker, and the inventory "
                         f"has {len(specs)} rank", fix="export a rack of two or more nodes")
    argvs = [group_argv(spec, definition, template_values(inventory, definition,
                                                          inventory.node(spec.node), lane.profile))
             for spec in specs]
    _check_one_template(specs, argvs)
    head = specs[0]
    secrets = secret_files(definition.secret_env, secret_name,
                           inventory.vars.hf_token_required, str(definition.file))

    def template(rank: int) -> dict[str, Any]:
        spec = specs[rank]
        return pod_template(spec, argvs[rank], export_env(spec, definition.secret_env),
                            metadata=_metadata(head, report), cluster=cluster,
                            cpu=inventory.vars.k8s_cpu, memory_gib=inventory.vars.k8s_memory_gib,
                            serves_api=spec.is_head, secrets=secrets,
                            serving=definition.serving)

    leader_worker_set = {
        "apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
        "metadata": {"name": name, **cluster.metadata(), **_metadata(head, report)},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",  # workers wait at the rendezvous on their own
            "leaderWorkerTemplate": {
                "size": len(specs),
                "restartPolicy": RESTART_POLICY,
                "leaderTemplate": template(0),
                "workerTemplate": template(1),
            },
        },
    }
    http = head.ports["http"]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name + SERVICE_SUFFIX, **cluster.metadata(),
                     "labels": _metadata(head, report)["labels"]},
        "spec": {"type": "ClusterIP",
                 "selector": {LWS_NAME_LABEL: name, LWS_WORKER_INDEX_LABEL: "0"},
                 "ports": [{"name": "http", "port": http, "targetPort": http,
                            "protocol": "TCP"}]},
    }
    watched = () if monitors is None else export_monitors(
        name, service["spec"]["selector"], service["metadata"]["labels"],
        inventory.vars.rack_name, cluster, monitors)
    support = (*export_access(cluster), *export_admission(cluster), scripts_config_map(cluster),
               *export_agent(inventory, head.image, cluster))
    return LwsExport(name=name, objects=(leader_worker_set, service, *watched), support=support,
                     report=report, secret_name=secret_name, secret_keys=secrets.keys,
                     namespace=cluster.namespace, secret_required=secrets.required)


def _metadata(head: LaunchSpec, report: CheckReport) -> dict[str, Any]:
    """Labels naming the lane and its deployment; the spec hash (too long for a label
    value) and the engine version the flags were checked against as annotations. A new
    dict each time: no two objects share one."""
    return {"labels": {LABEL_ENGINE: head.engine, LABEL_PROFILE: head.profile,
                       LABEL_DEPLOYMENT: head.deployment_id},
            "annotations": {LABEL_SPEC_HASH: head.spec_hash,
                            ANNOTATION_ENGINE_VERSION: report.engine_version or "unknown"}}


def _checked_name(name: str, flag: str) -> str:
    """name if Kubernetes takes it for the LWS and its Service; UsageError otherwise."""
    if not (_DNS_LABEL.fullmatch(name) and len(name + SERVICE_SUFFIX) <= 63):
        raise UsageError(f"'{name}' is not a Kubernetes name here",
                         fix=f"give {flag} NAME: lower-case letters, digits and '-', starting "
                         f"with a letter, at most {63 - len(SERVICE_SUFFIX)} long")
    return name


def _check_one_template(specs: tuple[LaunchSpec, ...], argvs: list[tuple[str, ...]]) -> None:
    """UsageError unless every rank has the same env and image and every worker the same
    argv once the rank-dependent words are LWS variables: one template serves them all."""
    head = specs[0]
    for spec, argv in zip(specs[1:], argvs[1:], strict=False):
        differing = sorted(key for key in {*head.env, *spec.env} - set(PER_NODE)
                           if head.env.get(key) != spec.env.get(key))
        if differing:
            raise UsageError(
                f"{', '.join(differing)} differs between {head.node} (rank 0) and {spec.node} "
                f"(rank {spec.rank}), and a LeaderWorkerSet gives every pod the same env",
                fix=f"set it once for the rack in group_vars, not per node in "
                f"host_vars/{spec.node}.yml or host_vars/{head.node}.yml")
        if spec.image != head.image or argv != argvs[1]:
            raise UsageError(f"rank {spec.rank} on {spec.node} runs a different command from "
                             f"rank 1 beyond its rank",
                             fix="only {rank}, {nnodes} and {head_roce_addr} may vary by rank "
                             "in the engine file's args")
