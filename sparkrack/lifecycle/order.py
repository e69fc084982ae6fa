"""Start and stop order of a TP group (docs/engines.md#order); STOP_ORDER_REASON is the stop
order's reason as `power-cycle` says it.
"""

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

STOP_ORDER_REASON = "rank 0 first so it drains, then the workers"


def start_order(by_rank: Sequence[T], rank_of) -> list[list[T]]:
    """Start waves: [[every worker, highest rank first], [rank 0]]."""
    workers = sorted((item for item in by_rank if rank_of(item) != 0), key=rank_of, reverse=True)
    head = [item for item in by_rank if rank_of(item) == 0]
    return [wave for wave in (workers, head) if wave]


def stop_order(by_rank: Sequence[T], rank_of) -> list[list[T]]:
    """Stop waves: [[rank 0], [every worker]] (workers stop in parallel)."""
    head = [item for item in by_rank if rank_of(item) == 0]
    workers = sorted((item for item in by_rank if rank_of(item) != 0), key=rank_of)
    return [wave for wave in (head, workers) if wave]
