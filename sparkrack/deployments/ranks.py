"""The engine containers on the nodes, through each node's docker API (fleet.docker; never
parsed CLI).

Containers are found by label (`sparkrack.engine`), so `down` and `watch` work from what
runs on the rack, not from what this machine remembers.
"""

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sparkrack.engines import (
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_PROFILE,
    LABEL_RANK,
    LABEL_STOP_TIMEOUT,
)
from sparkrack.fleet import Fleet
from sparkrack.fleet.containers import Container, ContainerNotFound

DEFAULT_STOP_TIMEOUT = 120


@dataclass
class Rank:
    """One engine container on one node, as docker reports it."""

    node: str
    rank: int
    name: str
    engine: str
    profile: str
    deployment: str
    status: str  # created | running | paused | exited | dead | missing | unreachable
    exit_code: int | None
    stop_timeout: int
    error: str | None = None
    health: str | None = None  # the image's HEALTHCHECK status, if it has one

    @property
    def alive(self) -> bool:
        """Its process lives: running, restarting, or paused (`docker pause` freezes it;
        `docker commit` pauses it for a moment: a frozen rank is judged by its group's
        progress, not taken for dead)."""
        return self.status in ("running", "restarting", "paused")


def parallel(items: Iterable, work: Callable) -> list:
    """Run work(item) for each item in a thread of its own; results in item order."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(work, items))


def _rank_of(node: str, container: Container) -> Rank:
    labels = container.labels
    return Rank(node=node, rank=int(labels.get(LABEL_RANK, -1)), name=container.name,
                engine=labels.get(LABEL_ENGINE, "?"), profile=labels.get(LABEL_PROFILE, "?"),
                deployment=labels.get(LABEL_DEPLOYMENT, "?"), status=container.status,
                exit_code=container.exit_code, health=container.health,
                stop_timeout=int(labels.get(LABEL_STOP_TIMEOUT, DEFAULT_STOP_TIMEOUT)))


def engine_containers(fleet: Fleet, nodes: Sequence | None = None
                      ) -> tuple[list[Rank], dict[str, str]]:
    """Every sparkrack engine container on the fleet's nodes (or these of them), and
    {node: error} for nodes whose docker could not be asked."""
    def on(node) -> tuple[list[Rank], str | None]:
        try:
            found = fleet.docker(node).containers(labels=[LABEL_ENGINE])
            return [_rank_of(node.name, c) for c in found], None
        except Exception as exc:  # unreachable node, dockerd down: reported per node
            return [], first_line(exc)

    ranks, errors = [], {}
    nodes = list(fleet.nodes if nodes is None else nodes)
    for node, (found, error) in zip(nodes, parallel(nodes, on), strict=False):
        ranks += found
        if error:
            errors[node.name] = error
    return sorted(ranks, key=lambda r: (r.rank, r.node)), errors


def refresh(fleet: Fleet, ranks: Sequence[Rank]) -> list[Rank]:
    """Re-read each rank's container state; a lost node or container shows in .status."""
    def one(rank: Rank) -> Rank:
        try:
            return _rank_of(rank.node, fleet.docker(rank.node).container(rank.name))
        except ContainerNotFound:
            return replace(rank, status="missing", error="container is gone")
        except Exception as exc:
            return replace(rank, status="unreachable", error=first_line(exc))

    return parallel(ranks, one)


def logs_tail(fleet: Fleet, rank: Rank, lines: int = 20) -> list[str]:
    """The last lines a rank's container printed, each after docker's timestamp (empty when
    it cannot be read)."""
    try:
        chunks = fleet.docker(rank.node).log_stream(rank.name, tail=lines)
        text = b"".join(chunks).decode(errors="replace")
    except Exception:
        return []
    return text.rstrip("\n").splitlines()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
