"""`--since` for every task that takes it (`logs`, `log`): one grammar, one parser.

A duration back from now (`90s`, `10m`, `1h30m`, `1.5d`, `1w`; units s m h d w, combined
largest first), unix seconds (`1767225600`), or an ISO 8601 date or time (`2026-05-01`,
`2026-05-01T14:05`, `2026-05-01 14:05`, `...Z`, `...+02:00`; no zone: this machine's local
time, as docker takes it).
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from sparkrack.core.errors import UsageError

HELP = ("a duration back (10m, 1h30m, 1w), a date or time (2026-05-01, 2026-05-01T14:05; "
        "local unless ...Z or +02:00) or unix seconds")
UNIT_S = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"\s*".join(rf"(?:(\d+(?:\.\d+)?)\s*{unit})?" for unit in UNIT_S))


def parse_since(text: str, now: float | None = None) -> float:
    """--since as unix seconds; UsageError naming the flag and the forms it takes."""
    text = text.strip()
    now = time.time() if now is None else now
    duration = _DURATION.fullmatch(text)
    if text and duration and any(duration.groups()):
        return now - sum(float(n) * s for n, s in zip(duration.groups(), UNIT_S.values(), strict=False) if n)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise UsageError(f"--since {text!r}: not a duration, a date or time, or unix seconds",
                         fix="e.g. --since 10m, 1h30m, 1w, 2026-05-01 or 2026-05-01T14:05"
                         ) from None
    return moment.timestamp()  # a naive time is local time
