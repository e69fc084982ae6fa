"""Reading back what nccl_env and engine_env wrote: the per-node env files as dicts.

The engine lifecycle passes env to the docker SDK from this machine, so it reads the
node's files rather than `--env-file` (which docker reads on the client side):

    with Fleet(inventory) as fleet:
        env = read_env_files(fleet, [NCCL_ENV, engine_env_path("sglang")])
    env["spark-03"]["NCCL_IB_GID_INDEX"]  # the index probed on that node
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkrack.fleet import Fleet

NCCL_ENV = "/etc/sparkrack/nccl.env"


def engine_env_path(engine: str) -> str:
    """Where engine_env writes an engine's env file (mode 0600: it can hold HF_TOKEN)."""
    return f"/etc/sparkrack/{engine}.env"


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (docker --env-file format: values literal, # comments)."""
    env = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        env[key.strip()] = value
    return env


def read_env_files(fleet: Fleet, paths: Sequence[str]) -> dict[str, dict[str, str] | None]:
    """{node: merged env of paths (later files win)}, None for a node that could not say
    (unreachable, or a file missing: run `invoke provision`)."""
    results = fleet.get({node.name: list(paths) for node in fleet.nodes})
    merged: dict[str, dict[str, str] | None] = {}
    for result in results:
        if not result.ok:
            merged[result.node] = None
            continue
        env: dict[str, str] = {}
        for path in paths:
            env.update(parse_env(result.files[path].decode(errors="replace")))
        merged[result.node] = env
    return merged
