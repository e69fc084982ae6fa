"""The running deployment, found from what runs on the rack: its ranks' containers.

Every task that asks "what runs now?" (the gates, roll, watch, reboot, logs, bench,
onboarding's replaced node) asks `running(fleet)`: the engine containers by label, the
ones alive, and the deployment they belong to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkrack.deployments.ranks import Rank, engine_containers
from sparkrack.fleet import Fleet


@dataclass(frozen=True)
class Running:
    """Every engine container found, and {node: error} where docker could not be asked."""

    ranks: Sequence[Rank] = ()
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def alive(self) -> list[Rank]:
        """The ranks whose container runs."""
        return [r for r in self.ranks if r.alive]

    @property
    def deployments(self) -> list[str]:
        """The deployments with a running rank, sorted (more than one is a mess to clear)."""
        return sorted({r.deployment for r in self.alive})

    @property
    def deployment(self) -> str | None:
        """The running deployment (the one with the most ranks alive, the first of a tie),
        or None."""
        pool = [r.deployment for r in self.alive]
        return max(dict.fromkeys(pool), key=pool.count) if pool else None

    @property
    def head(self) -> Rank | None:
        """The running rank 0, if any."""
        return next((r for r in self.alive if r.rank == 0), None)


def running(fleet: Fleet, nodes: Sequence | None = None) -> Running:
    """What runs on the fleet's nodes (or these of them) now, through each node's docker."""
    ranks, errors = engine_containers(fleet, nodes)
    return Running(tuple(ranks), errors)
