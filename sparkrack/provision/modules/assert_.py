"""assert: conditions on the facts, each a Jinja2 expression, with a message on failure.

`that` and `fail_msg` are evaluated with `facts` at plan time (late); so are `warn_that` and
`warn_msg`, checked once `that` holds: a condition that does not hold leaves the task ok
with a warning (what works, but not as the inventory means it). `gather` asks for
facts no other task needs: `roce` (HCA names), `paths`, `netdevs`, `functions` (every RDMA
device and its port state: the cabling), `images`, `renderer` (netplan's files and the
units of the daemons it renders with). After an earlier change in the same role the
assert is "pending", checked by the re-plan that follows the apply. Absent mode skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from sparkrack.facts.docker import IMAGES
from sparkrack.facts.files import file_query
from sparkrack.facts.netplan import DAEMON_QUERIES, NETPLAN
from sparkrack.facts.queries import Query
from sparkrack.facts.roce import FUNCTIONS, NETDEVS, roce_query
from sparkrack.provision.changes import Change
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.params import Param

GATHER = {
    "roce": Param("strings", "the HCAs whose names, GIDs and ports to read",
                  ["rocep1s0f0", "roceP2p1s0f0"]),
    "paths": Param("list", "files to read", ["/etc/netplan/40-cx7.yaml"]),
    "netdevs": Param("bool", "the node's network interfaces", True),
    "functions": Param("bool", "every RDMA device and its port state (the cabling)", True),
    "images": Param("bool", "the node's docker images", True),
    "renderer": Param("bool", "netplan's files and the units of the daemons it renders "
                      "with", True),
}
PARAMS = {
    "that": Param("strings", "a Jinja2 expression, or a list of them, evaluated with "
                  "`facts`: each must hold", "facts.roce.missing == []", required=True,
                  late=True),
    "fail_msg": Param("str", "the message when one does not hold (rendered with `facts`)",
                      "HCA {{ facts.roce.missing | join(', ') }} missing", late=True),
    "warn_that": Param("strings", "expressions checked once `that` holds: one that does not "
                       "hold leaves the task ok, with a warning", "facts.roce.missing == []",
                       late=True),
    "warn_msg": Param("str", "the warning when one does not hold (rendered with `facts`)",
                      "HCA {{ facts.roce.missing | join(', ') }} missing: NCCL runs on the rest",
                      late=True),
    "gather": Param("dict", "facts no other task asks for", {"netdevs": True},
                    options=GATHER),
}


def queries(p: Mapping[str, Any]) -> Iterable[Query]:
    """The facts `gather` asks for."""
    gather = p.get("gather") or {}
    hcas = gather.get("roce") or []
    for hca in [hcas] if isinstance(hcas, str) else hcas:
        yield roce_query(str(hca))
    for path in gather.get("paths") or []:
        yield file_query(str(path))
    if gather.get("netdevs"):
        yield NETDEVS
    if gather.get("functions"):
        yield FUNCTIONS
    if gather.get("images"):
        yield IMAGES
    if gather.get("renderer"):
        yield NETPLAN
        yield from DAEMON_QUERIES


def plan(step: Step) -> Change:
    """ok when every condition holds, else failed with fail_msg; ok with warn_msg as its
    warning when a warn_that condition does not hold."""
    base, p = step.base, step.params
    if step.state.absent:
        return replace(base, status="skipped", summary="skipped (unprovision)")
    that = p["that"]
    conditions = [that] if isinstance(that, str) else list(that)
    if step.state.role_changed:
        return replace(base, status="pending", summary="checked after the changes above")
    for condition in conditions:
        if not step.renderer.expr(str(condition), step.context):
            message = p.get("fail_msg")
            text = (str(step.renderer.value(message, step.context)) if message
                    else f"failed: {condition}")
            return replace(base, status="failed", summary=text)
    warn = p.get("warn_that")
    for condition in [] if warn is None else [warn] if isinstance(warn, str) else list(warn):
        if not step.renderer.expr(str(condition), step.context):
            message = p.get("warn_msg")
            text = (str(step.renderer.value(message, step.context)) if message
                    else f"does not hold: {condition}")
            return replace(base, summary=f"{len(conditions)} condition(s) hold; warning",
                           warning=text)
    return replace(base, summary=f"{len(conditions)} condition(s) hold")


MODULE = Module(
    name="assert",
    params=PARAMS,
    queries=queries,
    plan=plan,
)
