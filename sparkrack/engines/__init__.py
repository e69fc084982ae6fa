"""Engine profiles as data and the per-rank launch specs built from them.

- profile files (`<engine>.yml`, shipped in sparkrack/data/engines/): profile_file.py reads
  them, catalog.py finds them (the inventory's overrides first);
- model data (`<name>.yml`, shipped in sparkrack/data/models/) for the memory rules:
  model_data.py;
- `build_specs` (spec.py): inventory + engine + profile -> one LaunchSpec per rank
  (`template_values`: what a rank's argv templates are filled with; `model_path_of`: the
  lane's model directory, its profile's own or the inventory's);
- `docker_run_argv` / `docker_sdk_kwargs` (docker_args.py): a spec as docker sees it;
- the compile caches' folders and variables (compilecaches.py: `CacheKey`).
"""

from sparkrack.engines.catalog import engine_names
from sparkrack.engines.compilecaches import CacheKey
from sparkrack.engines.docker_args import docker_run_argv, docker_sdk_kwargs
from sparkrack.engines.model_data import ModelData, load_model
from sparkrack.engines.profile_file import EngineDef, Profile, load_engine
from sparkrack.engines.spec import (
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_PROFILE,
    LABEL_RANK,
    LABEL_SPEC_HASH,
    LABEL_STOP_TIMEOUT,
    REDACTED,
    DockerOptions,
    LaunchSpec,
    Mount,
    Ulimit,
    api_url,
    build_specs,
    container_name,
    model_path_of,
    template_values,
)

__all__ = [
    "LABEL_DEPLOYMENT", "LABEL_ENGINE", "LABEL_PROFILE", "LABEL_RANK", "LABEL_SPEC_HASH",
    "LABEL_STOP_TIMEOUT", "REDACTED", "CacheKey", "DockerOptions", "EngineDef", "LaunchSpec", "ModelData",
    "Mount", "Profile", "Ulimit", "api_url", "build_specs", "container_name", "docker_run_argv",
    "docker_sdk_kwargs", "engine_names", "load_engine", "load_model", "model_path_of",
    "template_values",
]
