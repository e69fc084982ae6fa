"""Engine profiles as data and the per-rank launch specs built from them.

- profile files (`<engine>.yml`, shipped in sparkrack/data/engines/): profile_file.py reads
  them, catalog.py finds them (the inventory's overrides first);
- model data (`<name>.yml`, shipped in sparkrack/data/models/) for the memory rules:
  model_data.py;
- an engine lane (lane.py: `EngineLane`): an engine's profile resolved once for an
  inventory (`resolve_lane`), the value `up`, `roll` and a restore pass down;
- `build_specs` (spec.py): inventory + engine + profile -> one LaunchSpec per rank
  (`lane_specs`: the same for a lane; `template_values`: what a rank's argv templates are
  filled with; `model_path_of`: the lane's model directory, its profile's own or the
  inventory's);
- `docker_run_argv` / `docker_sdk_kwargs` (docker_args.py): a spec as docker sees it;
- the compile caches' folders and variables (compilecaches.py: `CacheKey`).
"""

from sparkrack.engines.catalog import engine_names
from sparkrack.engines.compilecaches import CacheKey
from sparkrack.engines.docker_args import docker_run_argv, docker_sdk_kwargs
from sparkrack.engines.lane import EngineLane, engine_lane, resolve_lane
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
    lane_specs,
    lane_url,
    model_path_of,
    template_values,
)

__all__ = [
    "LABEL_DEPLOYMENT", "LABEL_ENGINE", "LABEL_PROFILE", "LABEL_RANK", "LABEL_SPEC_HASH",
    "LABEL_STOP_TIMEOUT", "REDACTED", "CacheKey", "DockerOptions", "EngineDef", "EngineLane",
    "LaunchSpec", "ModelData", "Mount", "Profile", "Ulimit", "api_url", "build_specs",
    "container_name", "docker_run_argv", "docker_sdk_kwargs", "engine_lane", "engine_names",
    "lane_specs", "lane_url", "load_engine", "load_model", "model_path_of", "resolve_lane",
    "template_values",
]
