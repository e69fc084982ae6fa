"""What the operator says about the cluster an exported lane goes to: its namespace, the
taints its GB10 nodes carry, the priority class of the engine pods, the RDMA device
plugin's resource and the RuntimeClass of NVIDIA's container runtime. Each is checked as
the API server would check it, so that `kubectl apply` is not the first to refuse.

The namespace is said in one place, here (default: sparkrack): every namespaced object
carries it, the RBAC subjects and the admission policy name it, and each cluster-scoped
object's name ends in it (`scoped`), so exports into two namespaces never overwrite each
other. The export labels it privileged (access.py): default and kube-* are refused."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.remote.capnode import TAINT

DEFAULT_NAMESPACE = "sparkrack"
DEFAULT_RDMA_RESOURCE = "rdma/hca_shared_devices_a"  # the RDMA shared device plugin's example
DEFAULT_RUNTIME_CLASS = "nvidia"  # the RuntimeClass NVIDIA's GPU operator installs
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_KEY = re.compile(rf"({_SUBDOMAIN.pattern}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")


@dataclass(frozen=True)
class ClusterOptions:
    """The cluster's side of an export (`invoke export --namespace ... --toleration ...`)."""

    namespace: str = DEFAULT_NAMESPACE
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class: str | None = None
    rdma_resource: str = DEFAULT_RDMA_RESOURCE
    runtime_class: str = DEFAULT_RUNTIME_CLASS

    def metadata(self) -> dict[str, str]:
        """The namespace for a namespaced object's metadata."""
        return {"namespace": self.namespace}

    def scoped(self, name: str) -> str:
        """A cluster-scoped object's name for this export: NAME.NAMESPACE (a namespace name
        has no dot, so no two exports' names meet)."""
        return f"{name}.{self.namespace}"


def cluster_options(namespace: str | None = None, tolerations: list[str] | tuple = (),
                    priority_class: str | None = None, rdma_resource: str | None = None,
                    runtime_class: str | None = None) -> ClusterOptions:
    """ClusterOptions from the task's flags; UsageError naming the flag and the fix."""
    namespace = DEFAULT_NAMESPACE if namespace is None else namespace
    if not (_DNS_LABEL.fullmatch(namespace) and len(namespace) <= 63):
        raise UsageError(f"--namespace {namespace!r} is not a namespace name",
                         fix="lower-case letters, digits and '-', at most 63")
    if namespace == "default" or namespace.startswith("kube-"):
        raise UsageError(f"--namespace {namespace}: the export brings its namespace labelled "
                         "privileged for pod security, which a cluster's own must not become",
                         fix=f"give the lane a namespace of its own (default: "
                         f"{DEFAULT_NAMESPACE})")
    for flag, value in (("--priority-class", priority_class),
                        ("--runtime-class", runtime_class)):
        if value is not None and not (_SUBDOMAIN.fullmatch(value) and len(value) <= 253):
            raise UsageError(f"{flag} {value!r} is not an object name",
                             fix="lower-case letters, digits, '-' and '.'")
    resource = rdma_resource or DEFAULT_RDMA_RESOURCE
    if not (_KEY.fullmatch(resource) and "/" in resource):
        raise UsageError(f"--rdma-resource {resource!r} is not an extended resource name",
                         fix="DOMAIN/NAME, as the RDMA device plugin advertises it, e.g. "
                         f"{DEFAULT_RDMA_RESOURCE}")
    return ClusterOptions(namespace, tuple(toleration(t) for t in tolerations),
                          priority_class, resource, runtime_class or DEFAULT_RUNTIME_CLASS)


def is_label(key: str, value: str) -> bool:
    """Whether the API server takes key=value as an object's label."""
    return bool(_KEY.fullmatch(key) and len(key.rpartition("/")[2]) <= 63
                and len(key.rpartition("/")[0]) <= 253
                and _VALUE.fullmatch(value) and len(value) <= 63)


def toleration(text: str) -> dict[str, Any]:
    """`KEY[=VALUE][:EFFECT]` as a pod toleration (no value: operator Exists; no effect:
    every effect); UsageError for one the API server would refuse."""
    rest, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, equals, value = rest.partition("=")
    fix = f"--toleration KEY[=VALUE][:EFFECT], EFFECT one of {', '.join(EFFECTS)}"
    if not (_KEY.fullmatch(key) and len(key.rpartition("/")[2]) <= 63):
        raise UsageError(f"--toleration {text!r}: {key!r} is not a taint key", fix=fix)
    if equals and not (_VALUE.fullmatch(value) and len(value) <= 63):
        raise UsageError(f"--toleration {text!r}: {value!r} is not a taint value", fix=fix)
    if effect and effect not in EFFECTS:
        raise UsageError(f"--toleration {text!r}: unknown effect {effect!r}", fix=fix)
    if key == TAINT:
        raise UsageError(f"--toleration {text!r}: {TAINT} is the node agent's: an engine pod "
                         "that tolerates it serves on a GPU whose cap is not verified",
                         fix="tolerate only the taints your GB10 nodes carry for other reasons")
    result: dict[str, Any] = {"key": key, "operator": "Equal" if equals else "Exists"}
    if equals:
        result["value"] = value
    if effect:
        result["effect"] = effect
    return result
