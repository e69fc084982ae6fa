"""What the rules look at (Target) and what a check yields: a Hit (a problem) or a Skip
(the check could not run, and why)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.engines import EngineDef, LaunchSpec, ModelData, Profile
from sparkrack.engines.option_names import canonical_names
from sparkrack.facts.kernel import KernelFacts
from sparkrack.inventory import Inventory
from sparkrack.rules.argv import flag_values
from sparkrack.rules.rule import LaunchFlags


@dataclass(frozen=True)
class Target:
    """One engine profile about to run: the inventory, its files and the exact launch specs."""

    inventory: Inventory
    engine: EngineDef
    profile: Profile
    model: ModelData
    specs: tuple[LaunchSpec, ...]  # by rank; empty when they could not be built
    node_kernels: Mapping[str, KernelFacts] | None  # None: no node facts gathered
    launch: LaunchFlags | None  # None: the rule set knows no launch flags for this engine

    def flags(self, spec: LaunchSpec) -> dict[str, str | bool]:
        """The flags of one rank's argv (argv.flag_values), named as the engine version the
        image runs reads them."""
        return flag_values(spec.argv, canonical_names(self.engine.options))


@dataclass(frozen=True)
class Hit:
    """A problem found, on one rank's node or (node None) for the deployment as a whole."""

    message: str
    node: str | None = None
    rank: int | None = None
    severity: str | None = None  # None: the rule's own severity

    @classmethod
    def on(cls, spec: LaunchSpec, message: str, severity: str | None = None) -> Hit:
        """A problem on the rank that spec describes."""
        return cls(message, spec.node, spec.rank, severity)


@dataclass(frozen=True)
class Skip:
    """A check that could not run; the report notes the reason."""

    reason: str
