"""The engines' speculative accept length, from what their endpoints expose.

- SGLang: the gauge `sglang:spec_accept_length` on /metrics (served with
  --enable-metrics); without it, `internal_states[0].avg_spec_accept_length` of
  /get_server_info (also /server_info).
- vLLM: the counters `vllm:spec_decode_num_drafts_total` and
  `vllm:spec_decode_num_accepted_tokens_total`; accept length = 1 + accepted / drafts over
  the bench (the counters read before and after it), i.e. tokens per verify step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lifecycle.progress import parse_prometheus

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SGLANG_ACCEPT = "sglang:spec_accept_length"


@dataclass(frozen=True)
class SpecSnapshot:
    """What the endpoint said about speculative decoding at one moment."""

    engine: str
    accept_length: float | None = None  # SGLang: the engine's own running average
    drafts: float | None = None  # vLLM counters
    accepted: float | None = None
    source: str | None = None


def snapshot(endpoint, engine: str) -> SpecSnapshot:
    """Read the endpoint's speculative metrics now (nothing exposed: all None)."""
    from ..lifecycle.headapi import HeadError

    try:
        status, body = endpoint.get("/metrics")
    except HeadError:
        status, body = None, b""
    values = parse_prometheus(body.decode(errors="replace")) if status == 200 else {}
    if engine == "vllm":
        if VLLM_DRAFTS in values and VLLM_ACCEPTED in values:
            return SpecSnapshot(engine, drafts=values[VLLM_DRAFTS],
                                accepted=values[VLLM_ACCEPTED], source="/metrics vllm:spec_decode_*")
        return SpecSnapshot(engine)
    if SGLANG_ACCEPT in values:
        return SpecSnapshot(engine, accept_length=values[SGLANG_ACCEPT],
                            source=f"/metrics {SGLANG_ACCEPT}")
    for path in ("/get_server_info", "/server_info"):
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
