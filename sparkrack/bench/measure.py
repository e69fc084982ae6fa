"""The arithmetic of the field report's method, pure (no I/O): decode rate, medians, ties.

Decode tok/s of one request = completion tokens after the first / (time of the last token
- time of the first token). The first token is the prefill's: its latency is the time to
first token (TTFT), reported apart. Token counts come from the server's `usage`; the
timestamps are when each streamed piece of the answer arrived here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

TIE_PCT = 3.0  # "treat anything inside about 3% as a tie" (field report)


def decode_rate(first: float | None, last: float | None, completion_tokens: int | None) -> float | None:
    """Tokens per second after the first token; None when it cannot be measured (fewer
    than two tokens, no usage, or every token arrived at once)."""
    if first is None or last is None or not completion_tokens or completion_tokens < 2:
        return None
    span = last - first
    if span <= 0:
        return None
    return (completion_tokens - 1) / span


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that were measured (None ignored); None if none were."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def aggregate_rate(total_tokens: int, began: float, ended: float) -> float | None:
    """Throughput of several users: all their completion tokens over the wall time from the
    first request sent to the last token received (queueing and prefill included)."""
    span = ended - began
    if total_tokens <= 0 or span <= 0:
        return None
    return total_tokens / span


def delta_pct(a: float | None, b: float | None) -> float | None:
    """(b - a) / a in percent; None if either is missing or a is 0 (unless both are 0)."""
    if a is None or b is None:
        return None
    if a == 0:
        return 0.0 if b == 0 else None
    return (b - a) / abs(a) * 100.0


def is_tie(a: float | None, b: float | None, tie_pct: float = TIE_PCT) -> bool:
    """Whether b is within tie_pct percent of a (the first run is the baseline)."""
    pct = delta_pct(a, b)
    return pct is not None and abs(pct) <= tie_pct + 1e-9
