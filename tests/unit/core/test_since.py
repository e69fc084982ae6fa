"""The one `--since` parser (`invoke logs`, `invoke log`)."""

from datetime import datetime

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.core.since import parse_since

NOW = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize("text, seconds_ago", [
    ("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400), ("2d", 172800), ("1.5h", 5400),
    ("1.5d", 129600), ("1w", 604800), ("1w2d", 777600), ("30 m", 1800), ("1h 30m", 5400)])
def test_durations_back_from_now(text, seconds_ago):
    assert parse_since(text, now=NOW) == NOW - seconds_ago


def test_dates_times_and_unix_seconds():
    assert parse_since("2026-01-01T00:00:00Z", now=0) == NOW
    assert parse_since("2026-01-01T02:00:00+02:00", now=0) == NOW
    assert parse_since("1767225600", now=0) == NOW
    local = datetime(2026, 5, 1, 14).timestamp()  # no zone: this machine's time, as docker
    assert parse_since("2026-05-01T14:00", now=0) == local
    assert parse_since("2026-05-01 14:00", now=0) == local
    assert parse_since("2026-05-01", now=0) == datetime(2026, 5, 1).timestamp()


@pytest.mark.parametrize("bad", ["yesterday", "10x", "", "m10", "30m1h", "last tuesday", "h"])
def test_anything_else_is_one_usage_line_with_the_forms(bad):
    with pytest.raises(UsageError) as refused:
        parse_since(bad, now=NOW)
    assert refused.value.line().startswith(f"--since {bad!r}: not a duration")
    assert "1h30m, 1w, 2026-05-01" in refused.value.line()
