"""Power arithmetic (pure): the rack's projected worst-case draw against its one strip.

Each node counts at its measured sustained draw (inventory): node_watts_capped when its
clock cap is verified, node_watts_uncapped when it is uncapped or its state is unknown
(worst case). Field report: uncapped long prefill drew ~1,735 W for the rack (8 x 217 W)
and tripped the 1,440 W strip; capped, 1,350-1,425 W (8 x 178 W = 1,424 W).

Verdicts:
- REFUSE: a node is not verified capped, or the projection exceeds the strip rating;
- MARGIN: every node capped and the projection within power_margin_watts below the strip
  (the measured capped rack is: 1,424 W against 1,440 W); may start, with a warning;
- OK: every node capped and the projection at or below strip - margin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.facts.node import burn_this_boot
from sparkrack.inventory import Inventory

OK, MARGIN, REFUSE = "ok", "margin", "refuse"


class CapState(str, Enum):  # noqa: UP042 - str() and format() stay as they were
    """A node's GPU clock cap as last verified."""

    CAPPED = "capped"
    UNCAPPED = "uncapped"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NodeDraw:
    """One node's share of the projection."""

    node: str
    state: CapState
    watts: int


@dataclass(frozen=True)
class PowerBudget:
    """The projected worst-case rack draw against the strip, and the verdict on it."""

    nodes: tuple[NodeDraw, ...]  # by rank
    strip_watts: int
    margin_watts: int
    verdict: str  # OK, MARGIN or REFUSE
    reason: str  # one line, e.g. "projected 1,463 W > 1,440 W strip: spark-03 uncapped"

    @property
    def projected_watts(self) -> int:
        """The sum of every node's worst-case draw."""
        return sum(draw.watts for draw in self.nodes)

    @property
    def limit_watts(self) -> int:
        """The strip rating less the margin kept below it."""
        return self.strip_watts - self.margin_watts

    @property
    def blocking(self) -> bool:
        """Whether an engine start must be refused (without an explicit override)."""
        return self.verdict == REFUSE

    def as_dict(self) -> dict[str, Any]:
        """The budget as plain JSON-ready data."""
        return {"verdict": self.verdict, "reason": self.reason, "blocking": self.blocking,
                "projected_watts": self.projected_watts, "strip_watts": self.strip_watts,
                "margin_watts": self.margin_watts, "limit_watts": self.limit_watts,
                "nodes": [{"node": d.node, "state": d.state.value, "watts": d.watts}
                          for d in self.nodes]}


def cap_state_of(facts: Any) -> CapState:
    """A node's cap as last verified, from its NodeFacts: CAPPED or UNCAPPED by the burn
    recorded this boot (facts.node.burn_this_boot), UNKNOWN without one (no query shows the
    lock: only a burn does)."""
    burn = burn_this_boot(facts)
    if burn is None:
        return CapState.UNKNOWN
    return CapState.CAPPED if burn.get("ok") else CapState.UNCAPPED


def project_power(inventory: Inventory,
                  cap_states: Mapping[str, CapState | str]) -> PowerBudget:
    """The worst-case projection for the inventory's nodes in these cap states; a node
    missing from cap_states counts as unknown. UsageError for an unknown node or state."""
    names = [node.name for node in inventory.nodes]
    for name in cap_states:
        if name not in names:
            raise UsageError(f"cap state given for unknown node '{name}'",
                             fix="known nodes: " + ", ".join(names))
    rack = inventory.vars
    draws = tuple(_draw(node.name, _state(cap_states.get(node.name, CapState.UNKNOWN)),
                        rack.node_watts_capped, rack.node_watts_uncapped)
                  for node in inventory.nodes)
    verdict, reason = _verdict(draws, rack.power_strip_watts, rack.power_margin_watts)
    return PowerBudget(draws, rack.power_strip_watts, rack.power_margin_watts, verdict, reason)


def _state(value: CapState | str) -> CapState:
    """value as a CapState; UsageError naming the states if it is none."""
    try:
        return CapState(value)
    except ValueError:
        raise UsageError(f"unknown cap state '{value}'",
                         fix="states: " + ", ".join(state.value for state in CapState)) from None


def _draw(node: str, state: CapState, capped: int, uncapped: int) -> NodeDraw:
    """One node's worst-case draw: capped watts only when its cap is verified."""
    return NodeDraw(node, state, capped if state is CapState.CAPPED else uncapped)


def _verdict(draws: tuple[NodeDraw, ...], strip: int, margin: int) -> tuple[str, str]:
    """The verdict and its one-line reason."""
    projected = sum(draw.watts for draw in draws)
    not_capped = "; ".join(
        f"{', '.join(d.node for d in draws if d.state is state)} "
        f"{'uncapped' if state is CapState.UNCAPPED else 'cap state unknown'}"
        for state in (CapState.UNCAPPED, CapState.UNKNOWN)
        if any(d.state is state for d in draws))
    if projected > strip:
        return REFUSE, f"projected {projected:,} W > {strip:,} W strip: " + (
            not_capped or "every node capped")
    if not_capped:
        return REFUSE, (f"{not_capped} (counted at uncapped watts; projected {projected:,} W "
                        f"<= {strip:,} W strip)")
    if projected > strip - margin:
        return MARGIN, (f"projected {projected:,} W: under the {strip:,} W strip but inside its "
                        f"{margin:,} W margin, every node capped")
    return OK, (f"projected {projected:,} W <= {strip:,} W strip - {margin:,} W margin, "
                "every node capped")
