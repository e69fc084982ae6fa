"""The contract of a provisioning module, and what its planner is given.

A module is one file of this package holding one `Module` (`MODULE`), registered in
`REGISTRY` (__init__.py). It declares its parameters (params.py: checked when the roles
load), the facts it needs (gathered in the one round trip), and how it plans (facts in, one
`Change` out). It applies through the actions of that Change: `Put` and `Run` are applied
on the node by apply.py, in plan order; `Transfer` (docker_image) by the image
distribution across nodes (runner.py, images.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.queries import Query
from sparkrack.provision.changes import Change
from sparkrack.provision.modules.params import Param
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roletasks import Role
from sparkrack.transfer.images import ImageTarget


@dataclass
class PlanState:
    """What earlier tasks of a node's plan did, for the later ones."""

    user: str
    absent: bool
    reload_pending: bool = False
    reloaded: bool = False
    started: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    role_changed: bool = False
    secrets: tuple[str, ...] = ()
    planned: dict[str, tuple[str, int, str, str]] = field(default_factory=dict)
    # path -> (type, mode, owner, group) as earlier tasks of this plan leave it


@dataclass(frozen=True)
class Step:
    """One task to plan on one node: what a module's planner is given."""

    base: Change  # the task's Change with status "ok": a planner returns replace(base, ...)
    role: Role
    params: Mapping[str, Any]
    context: Mapping[str, Any]  # the node's vars, and `facts`
    facts: ProvisionFacts
    state: PlanState
    renderer: Renderer
    images: Mapping[str, ImageTarget]  # normalized ref -> the rack-wide target


def no_queries(params: Mapping[str, Any]) -> Iterable[Query]:
    """A module that needs no facts."""
    return ()


def no_check(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """A module whose parameters need no check beyond their declarations."""
    return None


@dataclass(frozen=True)
class Module:
    """One provisioning module: what a role task `<name>: {params}` means.

    params: each parameter's declaration (params.py), checked when the roles load.
    check(params) -> (problem, fix) or None, at load time: what involves several
    parameters (command's guard).
    finish(state) -> a deferred Change or None, planned after every task, before handlers.
    """

    name: str
    params: Mapping[str, Param]
    plan: Callable[[Step], Change]
    queries: Callable[[Mapping[str, Any]], Iterable[Query]] = no_queries
    check: Callable[[Mapping[str, Any]], tuple[str, str] | None] = no_check
    finish: Callable[[PlanState], Change | None] | None = None

    @property
    def late(self) -> frozenset[str]:
        """The parameters left unrendered until plan time, then evaluated with `facts`."""
        return frozenset(name for name, param in self.params.items() if param.late)
