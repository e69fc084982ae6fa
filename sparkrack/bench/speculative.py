"""The engines' speculative accept length, from the series each engine's file names: a
gauge of its running average, its server info, or drafted and accepted counters read
before and after the bench (docs/engines.md#what-sparkrack-reads-of-a-running-engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.deployments.headapi import parse_prometheus
from sparkrack.engines.serving import Metrics


@dataclass(frozen=True)
class SpecSnapshot:
    """What the endpoint said about speculative decoding at one moment."""

    engine: str
    accept_length: float | None = None  # the engine's own running average
    drafts: float | None = None  # or its counters
    accepted: float | None = None
    source: str | None = None


def snapshot(endpoint, engine: str, metrics: Metrics) -> SpecSnapshot:
    """Read the endpoint's speculative metrics now, the series engine's file names (nothing
    exposed: all None)."""
    from sparkrack.deployments.headapi import HeadError

    try:
        status, body = endpoint.get("/metrics")
    except HeadError:
        status, body = None, b""
    values = parse_prometheus(body.decode(errors="replace")) if status == 200 else {}
    drafts, accepted = metrics.spec_drafts, metrics.spec_accepted
    if drafts in values and accepted in values:
        return SpecSnapshot(engine, drafts=values[drafts], accepted=values[accepted],
                            source=f"/metrics {drafts}, {accepted}")
    if metrics.accept_length in values:
        return SpecSnapshot(engine, accept_length=values[metrics.accept_length],
                            source=f"/metrics {metrics.accept_length}")
    for path in metrics.server_info:
        try:
            info = endpoint.get_json(path)
        except HeadError:
            info = None
        value = server_info_accept_length(info)
        if value is not None:
            return SpecSnapshot(engine, accept_length=value,
                                source=f"{path} avg_spec_accept_length")
    return SpecSnapshot(engine)


def server_info_accept_length(info: dict | None) -> float | None:
    """avg_spec_accept_length of SGLang's server info (internal_states[0] or top level)."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    candidates = [states[0]] if isinstance(states, list) and states and isinstance(states[0], dict) else []
    candidates.append(info)
    for place in candidates:
        value = place.get("avg_spec_accept_length")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def accept_length(before: SpecSnapshot, after: SpecSnapshot) -> tuple[float | None, str | None]:
    """(accept length over the bench, where it came from); (None, None) when not exposed
    or nothing was drafted (no speculative decoding)."""
    if after.accept_length is not None:
        return (after.accept_length if after.accept_length > 0 else None), after.source
    if None in (before.drafts, before.accepted, after.drafts, after.accepted):
        return None, None
    drafts = after.drafts - before.drafts
    accepted = after.accepted - before.accepted
    if drafts <= 0:
        return None, None
    return 1.0 + accepted / drafts, after.source
