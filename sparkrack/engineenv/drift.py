"""A node's env files judged against its engine environment, computed (pure): each file
read back with each variable's source, and every problem that must stop a start: a file
missing or unreadable, a failed check (checks.py), a variable whose value is not the
computed one or that sparkrack does not define (drift). No role is rendered: each file's
variables are compared with `EngineEnv.variables` directly; its comments are prose and
never judged (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkrack.engineenv.compute import NCCL_FILE, EngineEnv
from sparkrack.engineenv.nodeenv import (
    SECRET_KEYS,
    VIEW_NODE,
    EnvVar,
    NodeEnv,
    parse_env,
    read_vars,
)
from sparkrack.facts.files import FileFacts, file_query
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.queries import Query
from sparkrack.facts.roce import FUNCTIONS, NETDEVS, roce_query
from sparkrack.inventory.schema import FrozenMapping

GID_KEY = "NCCL_IB_GID_INDEX"


def queries(env: EngineEnv, key: str) -> list[Query]:
    """What a round trip asks to judge the node's env files for the engine of image key key:
    the files, and what checks.py and the GID index read (the HCAs, netdevs, RDMA devices)."""
    return [*map(file_query, env.files(key)), *map(roce_query, env.node.vars.nccl_ib_hca),
            NETDEVS, FUNCTIONS]


def judge(env: EngineEnv, key: str, facts: ProvisionFacts) -> NodeEnv:
    """The node's environment from the facts of a round trip that asked queries(env, key),
    with its problems; the GID index is chosen once, from facts.roce."""
    gid = env.gid(facts.roce)
    computed = env.variables(key, facts.roce)
    problems = [f"nccl_env: {why}" for why in env.failing(facts)]
    found: dict[str, EnvVar] = {}
    drifted: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for path in env.files(key):
        text = _text(facts.file(path), path, problems)
        if text is None:
            continue
        found.update(read_vars(text, path, computed))
        have = parse_env(text)
        want = {name: var.value for name, var in computed.items() if var.file == path}
        if have != want:
            drifted[path] = have, want
            problems.append(_drift(path, have, want))
    moved = None
    if len(problems) == 1 and set(drifted) == {NCCL_FILE} and gid.probed:
        have, want = drifted[NCCL_FILE]
        differ = {name for name in {*have, *want} if have.get(name) != want.get(name)}
        if differ == {GID_KEY}:
            moved = NCCL_FILE, have.get(GID_KEY, ""), want[GID_KEY]
    return NodeEnv(env.node.name, VIEW_NODE, FrozenMapping(found), tuple(problems), moved)


def _text(current: FileFacts, path: str, problems: list[str]) -> str | None:
    """A file's text as gathered (None, its problem added, when missing or unreadable)."""
    if not current.exists:
        problems.append(f"{path} missing")
    elif current.type != "file" or current.content is None:
        problems.append(f"{path} unreadable ({current.type or 'not a file'}, "
                        f"{current.size} bytes)")
    else:
        return current.content.decode(errors="replace")
    return None


def _drift(path: str, have: Mapping[str, str], want: Mapping[str, str]) -> str:
    """One line naming every variable that differs between a node's file and what provision
    would write now."""
    shown = [_shown(name, have.get(name), want.get(name))
             for name in dict.fromkeys([*want, *have]) if have.get(name) != want.get(name)]
    return f"{path} is not what provision would write now: {'; '.join(shown)}"


def _shown(name: str, have: str | None, want: str | None) -> str:
    if name in SECRET_KEYS:
        have, want = have and "***", want and "***"
    if have is None:
        return f"{name} missing (provision would write {want})"
    if want is None:
        return f"{name}={have} is not provision's"
    return f"{name} is {have}, provision would write {want}"
