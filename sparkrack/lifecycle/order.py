"""Start and stop order of a TP group, with the reason operators read in `invoke -h up`.

Start: every worker (at once), then rank 0 (the field's 8x-Spark and eugr launchers start
workers first and the head last). Workers wait at the rendezvous on their own; rank 0
starts last so that the moment it answers /health the whole group exists, and a client
can never reach a head whose workers are still being created.

Stop: rank 0 first, with a long timeout, so it drains in-flight requests and then tells the
workers to exit (SGLang ranks >= 1 only log SIGTERM and wait for rank 0); then the workers.
"""

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

START_ORDER_REASON = ("workers first, rank 0 last: the head's /health then means the whole "
                      "group is up")
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
