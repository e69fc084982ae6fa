"""A LaunchSpec as a `docker run` command line and as docker SDK (7.1) keyword arguments.

Both say the same thing: the spec's argv[0] replaces the image's entrypoint (the vLLM
image's own is `vllm serve`) and the rest is the command. One difference is forced by the
SDK: `containers.run` / `containers.create` take no stop timeout, so the caller passes
`spec.docker.stop_timeout_s` to `container.stop(timeout=...)` (it is also a label).
"""

from __future__ import annotations

from typing import Any

import docker.types

from sparkrack.core.errors import UsageError
from sparkrack.engines.spec import LaunchSpec


def docker_run_argv(spec: LaunchSpec, redact: bool = True) -> list[str]:
    """The exact `docker run` equivalent of spec; secret values are *** unless redact is
    False. Show it with shlex.join."""
    options = spec.docker
    argv = ["docker", "run", "--detach", "--name", spec.container_name,
            "--network", options.network_mode, "--ipc", options.ipc_mode, "--gpus", "all"]
    for device in options.devices:
        argv += ["--device", device]
    for capability in options.cap_add:
        argv += ["--cap-add", capability]
    for limit in options.ulimits:
        argv += ["--ulimit", f"{limit.name}={limit.soft}:{limit.hard}"]
    argv += ["--shm-size", options.shm_size, "--stop-signal", options.stop_signal,
             "--stop-timeout", str(options.stop_timeout_s)]
    for mount in spec.docker.binds():
        argv += ["--volume", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only
                                                                  else "")]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    for key, value in spec.shown_env(redact).items():
        argv += ["--env", f"{key}={value}"]
    return argv + ["--entrypoint", spec.argv[0], spec.image, *spec.argv[1:]]


def docker_sdk_kwargs(spec: LaunchSpec) -> dict[str, Any]:
    """Keyword arguments for `client.containers.create(**kw)` or `.run(**kw)` (docker SDK
    7.1) that start the container `docker_run_argv` describes, real secret values included.

    Prefer create + start: `run` pulls the image when it is missing, and the rack has no
    registry. Stop with `container.stop(timeout=spec.docker.stop_timeout_s)`.

    UsageError when the env holds a secret (an env file written before the Hub token moved
    to its own file, or edited by hand): `docker inspect` would show it.
    """
    for key in sorted(spec.secret_names & set(spec.env)):
        file = spec.env_sources.get(key, "").rpartition(" [")[2].rstrip("]") or "its env file"
        raise UsageError(f"{spec.node}: {key} is in the environment the engine would start "
                         f"with ({file}), where `docker inspect` shows it to anyone who may run "
                         "docker", fix="run invoke provision: the token goes to its own 0600 "
                         "file, which the ranks read through HF_TOKEN_PATH")
    options = spec.docker
    return {
        "image": spec.image,
        "entrypoint": [spec.argv[0]],
        "command": list(spec.argv[1:]),
        "name": spec.container_name,
        "detach": True,
        "network_mode": options.network_mode,
        "ipc_mode": options.ipc_mode,
        "device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
        "devices": [f"{device}:{device}" for device in options.devices],
        "cap_add": list(options.cap_add),
        "ulimits": [docker.types.Ulimit(name=u.name, soft=u.soft, hard=u.hard)
                    for u in options.ulimits],
        "shm_size": options.shm_size,
        "volumes": {m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
                    for m in options.binds()},
        "environment": dict(spec.env),
        "labels": dict(spec.labels),
        "stop_signal": options.stop_signal,
    }

