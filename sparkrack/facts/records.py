"""The deployment records on the head (`current`, `last-good`, `failed`) as facts: one
file query each, parsed to plain data (deployments/record.py makes Deployments of them);
and beside them the watchdog's last power cycle (`power-cycle`), for `invoke status`."""

from __future__ import annotations

import json

from sparkrack.facts.files import file_query
from sparkrack.facts.queries import Answers, Query

RECORD_DIR = "/var/lib/sparkrack/deployments"
KINDS = ("current", "last-good", "failed")
POWER_CYCLE = "power-cycle"  # the watchdog's last power cycle (watchdog/nodecycle.py)
RECORD_LIMIT = 1 << 20  # a record is a few kB: read whole up to this size


def queries() -> list[Query]:
    """The three record files, read whole."""
    return [file_query(f"{RECORD_DIR}/{kind}.json", RECORD_LIMIT) for kind in KINDS]


def records_of(answers: Answers) -> dict[str, dict | None]:
    """{kind: the record's JSON object, or None when absent or unreadable}."""
    return {kind: _object(answers.get(query).content)
            for kind, query in zip(KINDS, queries(), strict=True)}


NCCL = "nccl"  # what each rank's NCCL said it uses at the last start (lifecycle/start.py)


def nccl_query() -> Query:
    """The NCCL record of the last start, read whole."""
    return file_query(f"{RECORD_DIR}/{NCCL}.json", RECORD_LIMIT)


def nccl_of(answers: Answers) -> dict | None:
    """The NCCL record's JSON object (None: absent or unreadable)."""
    return _object(answers.get(nccl_query()).content)


def _object(content: bytes | None) -> dict | None:
    try:
        data = json.loads(content) if content and content.strip() else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def power_cycle_query() -> Query:
    """The watchdog's power-cycle record, read whole."""
    return file_query(f"{RECORD_DIR}/{POWER_CYCLE}.json", RECORD_LIMIT)


def power_cycle_of(answers: Answers) -> dict | None:
    """The power-cycle record's JSON object (None: absent or unreadable)."""
    return _object(answers.get(power_cycle_query()).content)
