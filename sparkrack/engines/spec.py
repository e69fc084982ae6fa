"""Launch specs: one per rank, everything needed to start that rank's engine container.

`build_specs` turns an inventory plus an engine profile into one LaunchSpec per node, in
rank order, without contacting anything. Per node it fills the profile file's argv
templates and takes the environment from that node's env files (`NodeEnv`, as `up` read
them from the node, or else computed from the inventory by sparkrack/engineenv: the
inventory's view), plus the profile's own `env`, which may not redefine one of theirs. Each variable
keeps its source for `invoke plan`. The Hub token is never among them: HF_TOKEN_PATH names
its file, whose folder every rank gets bound read-only. All specs share one `spec_hash` of the whole
deployment and carry it, with engine, profile, rank and deployment id, as container labels.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.engineenv import NodeEnv, inventory_views, secret_names
from sparkrack.engines.compilecaches import CACHE_MOUNT, SOURCE, CacheKey, cache_env
from sparkrack.engines.lane import EngineLane, resolve_lane
from sparkrack.engines.profile_file import (
    STALL_BUDGET_S,
    EngineDef,
    Profile,
    load_engine,
)
from sparkrack.engines.templates import fill
from sparkrack.facts.roce import socket_address
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping

REDACTED = "***"
# The file huggingface_hub reads the Hub token from (>= 0.23; role engine_env writes both the
# variable and the file, engineenv says where): its folder is bound into the rank read-only
# at the same path, so the token never is in the container's environment, which `docker
# inspect` shows.
TOKEN_FILE_VAR = "HF_TOKEN_PATH"

LABEL_ENGINE = "sparkrack.engine"
LABEL_PROFILE = "sparkrack.profile"
LABEL_RANK = "sparkrack.rank"
LABEL_DEPLOYMENT = "sparkrack.deployment"
LABEL_SPEC_HASH = "sparkrack.spec-hash"
LABEL_STOP_TIMEOUT = "sparkrack.stop-timeout"  # so `down` can drain a container it did not plan
# rank 0's exit once its drain is over: SGLang 0.5.22 looks every 5 s whether requests are
# left, then gives its schedulers 15 s to exit (tokenizer_manager.py, sigterm_watchdog)
DRAIN_EXIT_S = 30


@dataclass(frozen=True)
class Ulimit:
    """One resource limit of the container; -1 means unlimited."""

    name: str
    soft: int
    hard: int


@dataclass(frozen=True)
class Mount:
    """A host path bound into the container."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class DockerOptions:
    """How the container runs beyond image, argv and env; every container gets all GPUs.

    The defaults are what every 8x-Spark launcher uses (docs/field-notes.md, Containers).
    """

    stop_timeout_s: int  # SIGTERM to SIGKILL; docker's default 10 s cuts rank 0's drain short
    mounts: tuple[Mount, ...]
    network_mode: str = "host"  # NCCL, the rendezvous and the API use the host's interfaces
    ipc_mode: str = "host"  # shared memory between the engine's processes
    devices: tuple[str, ...] = ("/dev/infiniband",)  # the RoCE HCAs (verbs)
    cap_add: tuple[str, ...] = ("IPC_LOCK",)  # pin memory for RDMA registration
    ulimits: tuple[Ulimit, ...] = (Ulimit("memlock", -1, -1),
                                   Ulimit("nofile", 1048576, 1048576))  # NCCL at 8 ranks
    shm_size: str = "32g"
    stop_signal: str = "SIGTERM"  # rank 0 drains on SIGTERM, then stops the workers
    # the Hub token file's folder, read-only at the same path: the rack's way of handing the
    # token over (a Kubernetes export takes it from a Secret instead)
    token_mount: Mount | None = None

    def binds(self) -> tuple[Mount, ...]:
        """Every host path bound into the container, the one list that `docker run`'s
        --volume, the SDK's volumes and `plan --json`'s mounts all come from: the mounts,
        then the token's folder."""
        return (*self.mounts, *((self.token_mount,) if self.token_mount is not None else ()))


@dataclass(frozen=True)
class LaunchSpec:
    """One rank of a deployment: what to run on which node, and how."""

    engine: str
    profile: str
    node: str
    rank: int
    container_name: str
    image: str
    argv: tuple[str, ...]  # argv[0] replaces the image's entrypoint
    env: FrozenMapping = field(repr=False)  # real secret values: print shown_env() instead
    secret_names: frozenset[str]  # keys of env whose values are never shown
    env_sources: FrozenMapping  # var -> where its value came from (profile, inventory, probed)
    env_view: str  # "node": read from the node's env files; "inventory": rendered here
    ports: FrozenMapping  # port name -> number (host network: nothing is published)
    health_path: str
    ready_timeout_s: int
    experimental: bool
    note: str | None
    docker: DockerOptions
    deployment_id: str = ""
    spec_hash: str = ""
    labels: FrozenMapping = field(default_factory=lambda: FrozenMapping({}))
    stall_budget_s: int = STALL_BUDGET_S  # the watchdog's, not what runs: not in the hash

    @property
    def is_head(self) -> bool:
        """Whether this is rank 0: it serves the API and hosts the rendezvous."""
        return self.rank == 0

    def shown_env(self, redact: bool = True) -> dict[str, str]:
        """The env with secret values replaced by *** (unless redact is False)."""
        return {key: REDACTED if redact and key in self.secret_names else value
                for key, value in self.env.items()}

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-ready data, secret values shown as ***."""
        docker = self.docker
        return {
            "engine": self.engine, "profile": self.profile, "deployment_id": self.deployment_id,
            "spec_hash": self.spec_hash, "node": self.node, "rank": self.rank,
            "container_name": self.container_name, "image": self.image,
            "argv": list(self.argv), "env": self.shown_env(),
            "env_sources": dict(self.env_sources), "env_view": self.env_view,
            "secret_names": sorted(self.secret_names), "ports": dict(self.ports),
            "health_path": self.health_path, "ready_timeout_s": self.ready_timeout_s,
            "experimental": self.experimental, "note": self.note, "labels": dict(self.labels),
            "stall_budget_s": self.stall_budget_s,
            "docker": {
                "stop_timeout_s": docker.stop_timeout_s, "network_mode": docker.network_mode,
                "ipc_mode": docker.ipc_mode, "gpus": "all", "devices": list(docker.devices),
                "cap_add": list(docker.cap_add), "shm_size": docker.shm_size,
                "stop_signal": docker.stop_signal,
                "ulimits": [{"name": u.name, "soft": u.soft, "hard": u.hard}
                            for u in docker.ulimits],
                "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only}
                           for m in docker.binds()],
                "token_mount": None if docker.token_mount is None else {
                    "source": docker.token_mount.source, "target": docker.token_mount.target,
                    "read_only": docker.token_mount.read_only},
            },
        }


def build_specs(inventory: Inventory, engine: str, profile_name: str, *,
                deployment_id: str | None = None,
                node_env: Mapping[str, NodeEnv] | None = None,
                image: str | None = None, cache: CacheKey | None = None
                ) -> tuple[LaunchSpec, ...]:
    """One LaunchSpec per node of inventory, by rank, for engine's profile profile_name.

    deployment_id labels the containers (default: `<engine>-<profile>-<hash prefix>`, so a
    plan is deterministic). node_env is each node's environment as read from its env files
    (default: the inventory's view, engineenv's from the inventory). image runs
    instead of the inventory's (a roll back to the last good deployment's image). cache:
    bind each node's compile cache folder (default: none). UsageError for an unknown engine
    or profile, a node without an environment, or a profile variable that an env file or
    the caches define too; InventoryError for a bad profile file.
    """
    return lane_specs(inventory, resolve_lane(inventory, engine, profile_name, image=image),
                      deployment_id=deployment_id, node_env=node_env, cache=cache)


def lane_specs(inventory: Inventory, lane: EngineLane, *, deployment_id: str | None = None,
               node_env: Mapping[str, NodeEnv] | None = None, cache: CacheKey | None = None
               ) -> tuple[LaunchSpec, ...]:
    """build_specs for a lane resolved already (engines/lane.py): its profile file is not
    read again."""
    definition, profile = lane.definition, lane.profile
    _check_tp_size(inventory)
    image = lane.image or _image(inventory, definition)
    envs = node_env if node_env is not None else inventory_views(inventory,
                                                                 definition.image_key)
    _check_cache_vars(definition, profile)
    drafts = tuple(_with_cache(_rank_spec(inventory, node, definition, profile, image,
                                          _env_of(envs, node)), cache)
                   for node in inventory.nodes)
    spec_hash = deployment_hash(drafts)
    deployment = deployment_id or f"{definition.name}-{profile.name}-{spec_hash[:8]}"
    return tuple(replace(draft, deployment_id=deployment, spec_hash=spec_hash,
                         labels=_labels(draft, deployment, spec_hash)) for draft in drafts)


def deployment_hash(specs: tuple[LaunchSpec, ...]) -> str:
    """sha256 of what the deployment runs: every rank's node, image, argv, env and options.

    Leaves out the deployment id, the labels, the watchdog's stall budget, secret values
    and names (an operator's HF_TOKEN does not change what runs) and the compile caches
    (where compiled kernels are kept, not what runs), so equal plans hash equal.
    """
    content = []
    for spec in specs:
        data = spec.as_dict()
        for key in ("deployment_id", "spec_hash", "labels", "secret_names", "env_sources",
                    "env_view", "stall_budget_s"):
            del data[key]
        cached = cache_env(spec.engine)
        data["env"] = {key: value for key, value in spec.env.items()
                       if key not in spec.secret_names and key not in cached}
        token = data["docker"]["token_mount"]  # hashed on its own, as before it was listed
        data["docker"]["mounts"] = [m for m in data["docker"]["mounts"]
                                    if m["target"] != CACHE_MOUNT and m != token]
        content.append(data)
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def container_name(engine: str, rank: int) -> str:
    """The container name of one rank, e.g. sparkrack-sglang-r0."""
    return f"sparkrack-{engine}-r{rank}"


def _env_of(envs: Mapping[str, NodeEnv], node: Node) -> NodeEnv:
    if node.name not in envs:
        raise UsageError(f"no environment for {node.name}", fix="read every node's env files")
    return envs[node.name]


def rank_env(definition: EngineDef, profile: Profile, node_env: NodeEnv
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(env, sources) of one rank: the node's env files, then the profile's own variables.
    UsageError when the profile sets a variable an env file sets (one definition each)."""
    env = {key: var.value for key, var in node_env.vars.items()}
    sources = {key: f"{var.source} [{var.file}]" for key, var in node_env.vars.items()}
    for key, value in profile.env.items():
        if key in env:
            raise UsageError(
                f"{definition.name} profile {profile.name} sets {key}, which "
                f"{node_env.vars[key].file} already sets ({node_env.vars[key].source})",
                fix=f"define {key} once: remove it from {definition.file} or from the role")
        env[key] = value
        sources[key] = f"profile {definition.name} {profile.name} [{definition.file.name}]"
    return env, sources


def model_path_of(inventory: Inventory, profile: Profile | None) -> str:
    """The model directory a lane runs from: its profile's model_path, else the
    inventory's."""
    return (profile.model_path if profile is not None and profile.model_path
            else inventory.vars.model_path)


def lane_ports(inventory: Inventory, definition: EngineDef) -> FrozenMapping:
    """definition's ports, its `http` one the inventory's api_port when set (one address for
    the rack's clients whichever lane runs); UsageError if that takes another port's."""
    port = inventory.vars.api_port
    if not port:
        return definition.ports
    taken = [name for name, number in definition.ports.items()
             if number == port and name != "http"]
    if taken:
        raise UsageError(f"api_port {port} is {definition.name}'s {taken[0]} port too",
                         fix=f"set api_port in {inventory.path}/group_vars/all.yml to a free "
                         f"port, not one of {', '.join(map(str, definition.ports.values()))}")
    return FrozenMapping({**definition.ports, "http": port})


def api_url(inventory: Inventory, engine: str) -> str:
    """Where the rack's clients reach engine's API: rank 0's address and http port."""
    return lane_url(inventory, load_engine(inventory.path, engine, inventory.vars.images))


def lane_url(inventory: Inventory, definition: EngineDef) -> str:
    """api_url of an engine whose profile file was read already (a lane's definition)."""
    port = lane_ports(inventory, definition)["http"]
    return f"http://{inventory.head.address}:{port}/v1"


def template_values(inventory: Inventory, definition: EngineDef, node: Node,
                    profile: Profile | None = None) -> dict[str, Any]:
    """What definition's per-rank argv templates are filled with on node for profile
    (templates.py)."""
    rack = inventory.vars
    return {"model_path": model_path_of(inventory, profile), "model_name": rack.model_name,
            "tp_size": rack.tp_size, "nnodes": len(inventory.nodes), "rank": node.rank,
            "head_roce_addr": socket_address(inventory.head),
            "drain_budget_s": rack.drain_budget_s,
            **{f"{name}_port": port
               for name, port in lane_ports(inventory, definition).items()}}


def _rank_spec(inventory: Inventory, node: Node, definition: EngineDef, profile: Profile,
               image: str, node_env: NodeEnv) -> LaunchSpec:
    """The spec of one node's rank, without deployment id, hash and labels."""
    values = template_values(inventory, definition, node, profile)
    model_path = values["model_path"]
    args = definition.args
    role_args = args.head if node.is_head else args.workers
    argv = (*definition.entrypoint, *(fill(word, values) for word in args.model),
            *profile.argv(), *(fill(word, values) for word in (*args.every_rank, *role_args)))
    env, sources = rank_env(definition, profile, node_env)
    return LaunchSpec(
        engine=definition.name, profile=profile.name, node=node.name, rank=node.rank,
        container_name=container_name(definition.name, node.rank), image=image,
        argv=argv, env=FrozenMapping(env),
        secret_names=secret_names(node_env.vars, definition.secret_env),
        env_sources=FrozenMapping(sources), env_view=node_env.view,
        ports=lane_ports(inventory, definition), health_path=definition.health_path,
        ready_timeout_s=profile.ready_timeout_s, experimental=profile.experimental,
        note=profile.note,
        stall_budget_s=inventory.vars.watchdog_stall_budget_s or profile.stall_budget_s,
        docker=DockerOptions(stop_timeout_s=stop_timeout(inventory, profile, node),
                             mounts=(Mount(model_path, model_path),),
                             token_mount=_token_mount(node.name, env)))


def stop_timeout(inventory: Inventory, profile: Profile, node: Node) -> int:
    """SIGTERM to SIGKILL for node's rank: the profile's; rank 0's at least the rack's
    drain budget plus DRAIN_EXIT_S, so that a `docker stop` (by hand, or a node shutting
    down) lets it drain too (docs/engines.md#draining)."""
    if not node.is_head:
        return profile.stop_timeout_s
    return max(profile.stop_timeout_s, inventory.vars.drain_budget_s + DRAIN_EXIT_S)


def _token_mount(node: str, env: Mapping[str, str]) -> Mount | None:
    """The Hub token file's folder, bound read-only at the same path (a folder rather than
    the file: a token that provision replaces is what a running rank reads next); None when
    the env names no token file. UsageError for a file not in a folder of its own."""
    path = env.get(TOKEN_FILE_VAR)
    if not path:
        return None
    folder = posixpath.dirname(path)
    if not posixpath.isabs(path) or folder in ("/", "") or posixpath.normpath(path) != path:
        raise UsageError(f"{node}: {TOKEN_FILE_VAR} {path} is not a file in a folder of its "
                         "own (its folder is bound into every rank)",
                         fix="run invoke provision: it writes the token to a folder of its "
                         "own and names it there")
    return Mount(folder, folder)


def _with_cache(spec: LaunchSpec, cache: CacheKey | None) -> LaunchSpec:
    """spec with its node's compile cache folder bound at CACHE_MOUNT and the engine's
    caches pointed into it (unchanged without a key or a folder for the node)."""
    folder = cache.folder(spec.engine, spec.node) if cache is not None else None
    if folder is None:
        return spec
    env = cache_env(spec.engine)
    return replace(spec, env=FrozenMapping({**spec.env, **env}),
                   env_sources=FrozenMapping({**spec.env_sources,
                                              **{key: SOURCE for key in env}}),
                   docker=replace(spec.docker, mounts=(
                       *spec.docker.mounts, Mount(folder, CACHE_MOUNT, read_only=False))))


def _check_cache_vars(definition: EngineDef, profile: Profile) -> None:
    """UsageError when the profile sets a variable that points a compile cache (each is
    sparkrack's: the rank's node folder)."""
    taken = sorted(set(profile.env) & set(cache_env(definition.name)))
    if taken:
        raise UsageError(f"{definition.name} profile {profile.name} sets {taken[0]}, which "
                         f"sparkrack sets to the node's compile cache folder ({SOURCE})",
                         fix=f"remove {taken[0]} from {definition.file}")


def _labels(spec: LaunchSpec, deployment: str, spec_hash: str) -> FrozenMapping:
    """The container labels that identify a rank of a deployment."""
    return FrozenMapping({
        LABEL_ENGINE: spec.engine, LABEL_PROFILE: spec.profile, LABEL_RANK: str(spec.rank),
        LABEL_DEPLOYMENT: deployment, LABEL_SPEC_HASH: spec_hash,
        LABEL_STOP_TIMEOUT: str(spec.docker.stop_timeout_s)})


def _check_tp_size(inventory: Inventory) -> None:
    """UsageError unless tp_size equals the node count (one rank per node)."""
    tp_size, count = inventory.vars.tp_size, len(inventory.nodes)
    if tp_size != count:
        raise UsageError(f"tp_size is {tp_size} but the inventory has {count} nodes",
                         fix=f"set tp_size: {count} in {inventory.path}/group_vars/all.yml")


def _image(inventory: Inventory, definition: EngineDef) -> str:
    """The image ref the inventory gives for the engine's image key."""
    images = inventory.vars.images
    if definition.image_key not in images:
        raise UsageError(f"the inventory has no image for '{definition.image_key}' "
                         f"(needed by {definition.file})",
                         fix=f"add images: {{{definition.image_key}: REF}} to "
                         f"{inventory.path}/group_vars/all.yml")
    return images[definition.image_key]
