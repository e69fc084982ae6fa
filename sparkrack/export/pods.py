"""The pod templates of an exported lane: a launch spec's container as a Guaranteed pod on
cap-verified GB10 nodes, past its gate (docs/kubernetes.md#docker-run-in-pod-terms).
"""

from __future__ import annotations

import re
from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.engines import LaunchSpec
from sparkrack.engines.compilecaches import CACHE_MOUNT
from sparkrack.engines.serving import Serving
from sparkrack.export.cluster import ClusterOptions
from sparkrack.export.gate import gate_container, gate_pod_fields, gate_volume
from sparkrack.export.probes import leader_probes, worker_probes
from sparkrack.export.scripts import run_script, scripts_mount, scripts_volume
from sparkrack.export.secrets import SecretFiles
from sparkrack.remote.capnode import LABEL as CAP_VERIFIED_LABEL

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA GPU feature discovery
GB10_PRODUCT = "NVIDIA-GB10"
GPU_RESOURCE = "nvidia.com/gpu"
RDMA_DEVICE = "/dev/infiniband"
LEADER_WAIT_S = 600  # a worker's wait for its leader's address to resolve
SMALL = {"cpu": "100m", "memory": "128Mi"}  # a helper container's requests and limits
_PORT_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # and at most 15 long, with a letter
_DOCKER_SIZE = re.compile(r"([0-9]+)([bkmg]?)", re.IGNORECASE)
_SIZE_UNITS = {"": ("", 1), "b": ("", 1), "k": ("Ki", 1 << 10), "m": ("Mi", 1 << 20),
               "g": ("Gi", 1 << 30)}  # docker's unit -> Kubernetes' suffix, bytes


def pod_template(spec: LaunchSpec, argv: tuple[str, ...], env: list[dict[str, Any]], *,
                 metadata: dict[str, Any], cluster: ClusterOptions, cpu: int,
                 memory_gib: int, serves_api: bool, secrets: SecretFiles,
                 serving: Serving) -> dict[str, Any]:
    """A PodTemplateSpec that runs argv (argv[0] the entrypoint) with env and secrets in
    spec's image and spec's docker options, Guaranteed (cpu cores, memory_gib GiB), behind
    its gate; with the API's ports when serves_api, else the wait for the leader; probed
    where serving (the engine file's) says."""
    options = spec.docker
    shm = shm_quantity(options.shm_size, memory_gib)
    container: dict[str, Any] = {
        "name": spec.engine, "image": spec.image, "command": list(argv[:1]),
        "args": list(argv[1:]), "env": [*env, *secrets.env],
        "resources": guaranteed({"cpu": str(cpu), "memory": f"{memory_gib}Gi",
                                 **_devices(spec, cluster.rdma_resource)}),
        "securityContext": {"capabilities": {"add": list(options.cap_add)}},
        "volumeMounts": [*({"name": _volume_name(mount.target), "mountPath": mount.target,
                            "readOnly": mount.read_only} for mount in options.mounts),
                         {"name": "dshm", "mountPath": "/dev/shm"}, *secrets.mounts],
    }
    init = [gate_container(spec.image, guaranteed(SMALL))]
    if serves_api:
        container["ports"] = [{"name": _port_name(name), "containerPort": number,
                               "protocol": "TCP"} for name, number in spec.ports.items()]
        container.update(leader_probes(spec, serving))
    else:
        init.append({"name": "wait-for-leader", "image": spec.image,
                     "command": [*run_script("leader"), "wait", str(LEADER_WAIT_S)],
                     "resources": guaranteed(SMALL), "volumeMounts": [scripts_mount()]})
        container.update(worker_probes(spec, serving))
    host_network = options.network_mode == "host"
    pod: dict[str, Any] = {
        **gate_pod_fields(),
        "hostNetwork": host_network,
        "dnsPolicy": "ClusterFirstWithHostNet" if host_network else "ClusterFirst",
        "nodeSelector": {GPU_PRODUCT_LABEL: GB10_PRODUCT, CAP_VERIFIED_LABEL: "true"},
        **({"tolerations": [dict(t) for t in cluster.tolerations]}
           if cluster.tolerations else {}),
        **({"priorityClassName": cluster.priority_class} if cluster.priority_class else {}),
        "terminationGracePeriodSeconds": options.stop_timeout_s,
        "initContainers": init,
        "containers": [container],
        "volumes": [*({"name": _volume_name(mount.target),
                       "hostPath": {"path": mount.source, "type": "DirectoryOrCreate"
                                    if mount.target == CACHE_MOUNT else "Directory"}}
                      for mount in options.mounts),
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
                    *secrets.volumes, gate_volume(), scripts_volume()],
    }
    return {"metadata": metadata, "spec": pod}


def guaranteed(amounts: dict[str, Any]) -> dict[str, Any]:
    """Resources with requests equal to limits (Guaranteed QoS, when every container's are)."""
    return {"requests": dict(amounts), "limits": dict(amounts)}


def shm_quantity(size: str, memory_gib: int) -> str:
    """docker's --shm-size (32g) as a Kubernetes quantity (32Gi); UsageError when the
    memory-backed volume would not fit the pod's memory, which it is counted against."""
    found = _DOCKER_SIZE.fullmatch(size.strip())
    if not found:
        raise UsageError(f"shm size {size!r} is not docker's NUMBER[b|k|m|g]",
                         fix="write it as docker's --shm-size takes it, e.g. 32g")
    number, unit = int(found.group(1)), found.group(2).lower()
    suffix, scale = _SIZE_UNITS[unit]
    quantity = f"{number}{suffix}"
    if number * scale >= memory_gib << 30:
        raise UsageError(f"/dev/shm ({quantity}) would take all of the pod's {memory_gib} GiB",
                         fix="raise k8s_memory_gib in group_vars/all.yml")
    return quantity


def _devices(spec: LaunchSpec, rdma_resource: str) -> dict[str, int]:
    """The node's GPU and, for the RDMA device, one unit of rdma_resource."""
    limits = {GPU_RESOURCE: 1}
    for device in spec.docker.devices:
        if device != RDMA_DEVICE:
            raise UsageError(f"no Kubernetes resource is known for device {device}",
                             fix=f"only {RDMA_DEVICE} is exported, as {rdma_resource}")
        limits[rdma_resource] = 1
    return limits


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
