"""The pod templates of an exported lane: a launch spec's container as a pod.

What `docker run` says (DockerOptions) and what the pod says instead:

- `--network host` -> hostNetwork, with dnsPolicy ClusterFirstWithHostNet so that the pod
  still resolves LWS_LEADER_ADDRESS, a cluster DNS name;
- `--ipc host` -> hostIPC: shared memory is the node's, as with docker, where `--shm-size`
  has no effect under `--ipc host`;
- `--gpus all` -> one `nvidia.com/gpu` (a GB10 node has one GPU);
- `--device /dev/infiniband` -> one unit of the RDMA device plugin's resource;
- `--cap-add IPC_LOCK` -> the container's capabilities;
- `--volume SRC:DST:ro` -> a hostPath volume mounted read-only at DST;
- `--stop-timeout` -> terminationGracePeriodSeconds (SIGTERM is Kubernetes' signal too);
- `--ulimit memlock/nofile` -> none: a pod cannot set them; containers inherit the runtime's
  limits, which provisioning's node_limits role sets on each node.

Pods are placed only on GB10 nodes that carry CAP_VERIFIED_LABEL: no engine on a GPU whose
clock cap is not verified. The leader serves the API: it declares the engine's ports and
probes the health path (startup within the profile's ready timeout; liveness as
`invoke watch` judges rank 0).
"""

from __future__ import annotations

import math
import re
from typing import Any

from sparkrack.engines import LaunchSpec
from sparkrack.errors import UsageError
from sparkrack.lifecycle.watch import HEALTH_FAILURES_TO_ACT, HEALTH_TIMEOUT_S, POLL_INTERVAL_S

CAP_VERIFIED_LABEL = "sparkrack.io/clock-cap-verified"
"""Node label an operator sets to "true" once `invoke burn` says the node's GPU is capped."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA GPU feature discovery
GB10_PRODUCT = "NVIDIA-GB10"
GPU_RESOURCE = "nvidia.com/gpu"
RDMA_DEVICE = "/dev/infiniband"
DEFAULT_RDMA_RESOURCE = "rdma/hca_shared_devices_a"  # the RDMA shared device plugin's example
HEALTH_CHECK_PERIOD_S = 10  # startup and readiness probes
_PORT_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # and at most 15 long, with a letter


def pod_template(spec: LaunchSpec, argv: tuple[str, ...], env: list[dict[str, Any]], *,
                 metadata: dict[str, Any], rdma_resource: str,
                 serves_api: bool) -> dict[str, Any]:
    """A PodTemplateSpec that runs argv (argv[0] the entrypoint) with env in spec's image
    and spec's docker options; with the API's ports and probes when serves_api."""
    options = spec.docker
    container: dict[str, Any] = {
        "name": spec.engine, "image": spec.image, "command": list(argv[:1]),
        "args": list(argv[1:]), "env": env,
        "resources": {"limits": _limits(spec, rdma_resource)},
        "securityContext": {"capabilities": {"add": list(options.cap_add)}},
        "volumeMounts": [{"name": _volume_name(mount.target), "mountPath": mount.target,
                          "readOnly": mount.read_only} for mount in options.mounts],
    }
    if serves_api:
        container["ports"] = [{"name": _port_name(name), "containerPort": number,
                               "protocol": "TCP"} for name, number in spec.ports.items()]
        container.update(_probes(spec))
    host_network = options.network_mode == "host"
    return {"metadata": metadata, "spec": {
        "hostNetwork": host_network,
        "dnsPolicy": "ClusterFirstWithHostNet" if host_network else "ClusterFirst",
        "hostIPC": options.ipc_mode == "host",
        "nodeSelector": {GPU_PRODUCT_LABEL: GB10_PRODUCT, CAP_VERIFIED_LABEL: "true"},
        "terminationGracePeriodSeconds": options.stop_timeout_s,
        "containers": [container],
        "volumes": [{"name": _volume_name(mount.target),
                     "hostPath": {"path": mount.source, "type": "Directory"}}
                    for mount in options.mounts],
    }}


def _limits(spec: LaunchSpec, rdma_resource: str) -> dict[str, int]:
    """The node's GPU and, for the RDMA device, one unit of rdma_resource."""
    limits = {GPU_RESOURCE: 1}
    for device in spec.docker.devices:
        if device != RDMA_DEVICE:
            raise UsageError(f"no Kubernetes resource is known for device {device}",
                             fix=f"only {RDMA_DEVICE} is exported, as {rdma_resource}")
        limits[rdma_resource] = 1
    return limits


def _probes(spec: LaunchSpec) -> dict[str, Any]:
    """Startup within the profile's ready timeout, readiness, and liveness as `invoke watch`
    judges rank 0: HEALTH_FAILURES_TO_ACT polls in a row without a timely answer."""
    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": spec.health_path, "port": "http"},
                "timeoutSeconds": HEALTH_TIMEOUT_S, "periodSeconds": period_s,
                "failureThreshold": failures}

    return {
        "startupProbe": probe(HEALTH_CHECK_PERIOD_S,
                              math.ceil(spec.ready_timeout_s / HEALTH_CHECK_PERIOD_S)),
        "readinessProbe": probe(HEALTH_CHECK_PERIOD_S, 1),
        "livenessProbe": probe(max(1, round(POLL_INTERVAL_S)), HEALTH_FAILURES_TO_ACT),
    }


def _port_name(name: str) -> str:
    """An engine file's port name as a Kubernetes port name (dist_init -> dist-init)."""
    text = name.lower().replace("_", "-")
    if not (len(text) <= 15 and _PORT_NAME.fullmatch(text) and re.search("[a-z]", text)):
        raise UsageError(f"port '{name}' does not make a Kubernetes port name ('{text}')",
                         fix="name the port in the engine file with at most 15 letters, "
                         "digits and single '_'")
    return text


def _volume_name(path: str) -> str:
    """A volume name for a mount's target path (/models/GLM-5.3 -> models-glm-5-3)."""
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")[:63].strip("-")
