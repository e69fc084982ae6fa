"""A GID index that moved at a boot, written again before a start (docs/engines.md).

Real units put the RoCE v2 IPv4 entry at 3, 5 or 6 and move it across reboots. When the
one thing wrong with a node's env files is that NCCL_IB_GID_INDEX no longer names its
fabric address's entry, `up` (and so the watchdog's restart and `restart-rack`) rewrites
that node's NCCL env file the way provision would, in the same step, says so and records
it in the audit log, instead of refusing until someone runs `invoke provision`.
"""

from __future__ import annotations

from sparkrack.engineenv import NodeEnv
from sparkrack.oplock.audit import note
from sparkrack.provision.envfiles import EnvFiles
from sparkrack.provision.runner import provision


def moved(env: dict[str, NodeEnv]) -> dict[str, tuple[str, str, str]]:
    """{node: (file, written, probed)} of the nodes whose one problem is a moved GID."""
    return {name: e.gid_moved for name, e in env.items() if e.gid_moved}


def rewrite(fleet, env_files: EnvFiles, env: dict[str, NodeEnv]) -> tuple[list[str], list[str]]:
    """Rewrite the NCCL env file of every node in env whose GID moved; (what was done, one
    line a node, and the problems of nodes where it failed). env is updated in place with
    each rewritten node's files read again."""
    found = moved(env)
    if not found:
        return [], []
    inventory = env_files.inventory
    nodes = [inventory.node(name) for name in found]
    report = provision(inventory, nodes, roles="nccl_env")
    failed = [f"{run.node}: rewriting its NCCL env file failed: {run.error or run.status}"
              for run in report.nodes if run.status != "ok"]
    done = [f"{name}: NCCL_IB_GID_INDEX {written} -> {probed} (its GID table moved, as at a "
            f"boot; {path} rewritten as provision would)"
            for name, (path, written, probed) in found.items()
            if name not in {line.split(":", 1)[0] for line in failed}]
    if done:
        note(gid_moved={name: f"{w} -> {p}" for name, (_, w, p) in found.items()},
             files=[f"{path}@{name}" for name, (path, _, _) in found.items()])
    read, lost = env_files.read_all(fleet, nodes)
    env.update(read)
    failed += [f"{name}: {why}" for name, why in lost.items()]
    return done, failed
