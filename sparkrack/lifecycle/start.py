"""Start a TP group in order and wait until it serves, or take every started rank down.

Readiness: each rank's container must stay running, and rank 0's health endpoint must
answer 200 within the profile's ready timeout. Any rank exiting, a node lost, the timeout,
or Ctrl-C stops every rank this start created (nothing is left half-up) and raises.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.headapi import Endpoint
from sparkrack.deployments.ranks import Rank, logs_tail, parallel, refresh
from sparkrack.engines import LABEL_ENGINE, LaunchSpec, docker_sdk_kwargs
from sparkrack.engines.serving import Serving
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle import ncclcheck, nodelimits
from sparkrack.lifecycle.cachefolders import make_folders
from sparkrack.lifecycle.order import start_order
from sparkrack.lifecycle.phases import Phases
from sparkrack.lifecycle.stop import stop_ranks
from sparkrack.logs.causes import known_cause
from sparkrack.logs.lines import reason, split_timestamp
from sparkrack.logs.nccluse import nccl_use

POLL_SECONDS = 0.2
CLEANUP_STOP_TIMEOUT = 3  # a group that never served has nothing to drain
LIVENESS_TIMEOUT = 3


# what no answer from rank 0 means while the group starts: both engines open the port only
# once every rank has loaded (docs/engines.md#readiness)
NOT_OPEN = "no answer: its HTTP port opens only once every rank has loaded"


@dataclass
class Progress:
    """What the readiness wait knows at one poll."""

    running: int
    total: int
    joined: int
    head_status: int | None
    elapsed: float


class StartFailed(SparkrackError):
    """The group did not come up; every rank it started has been stopped. log_tail: the
    failed rank's last log lines ({"rank", "node", "lines"}: docker's timestamp, then the
    text), kept in the failed record for `invoke logs --failed` (its containers are gone)."""

    log_tail: dict | None = None


class NodeLost(StartFailed):
    """A node stopped answering during the start; its rank could not be stopped from here."""

    def __init__(self, node: str, why: str):
        self.node = node
        super().__init__(f"node {node} lost during the start ({why}); its rank could not be "
                         "stopped from here", fix=f"check {node}; `invoke down` once it answers")


def as_rank(spec: LaunchSpec, status: str = "created") -> Rank:
    """The Rank a spec becomes once its container exists."""
    return Rank(node=spec.node, rank=spec.rank, name=spec.container_name, engine=spec.engine,
                profile=spec.profile, deployment=spec.deployment_id, status=status,
                exit_code=None, stop_timeout=spec.docker.stop_timeout_s)


def remove_leftovers(fleet: Fleet, specs: tuple[LaunchSpec, ...]) -> None:
    """Remove stopped sparkrack containers that hold our names (an earlier failed start).
    A running one is another deployment: StartFailed, and it is left alone."""
    def one(spec: LaunchSpec) -> None:
        try:
            node = fleet.docker(spec.node)
            found = node.containers(name=spec.container_name)
        except Exception as exc:  # a node lost since the gates: nothing was created yet
            raise NodeLost(spec.node, str(exc).splitlines()[0] if str(exc) else
                           type(exc).__name__) from None
        for c in found:
            if c.alive or LABEL_ENGINE not in c.labels:
                raise StartFailed(f"{spec.node} already has a container {spec.container_name} "
                                  f"({c.status}) that this start did not create",
                                  fix="`invoke down` stops a sparkrack engine; remove anything else by hand")
            node.remove(c.id)

    parallel(specs, one)


def prepare(fleet: Fleet, inventory: Inventory, specs: tuple[LaunchSpec, ...], *,
            on_event: Callable[[str], None] = lambda e: None) -> nodelimits.Limits:
    """Remove an earlier failed start's stopped containers, make the ranks' compile cache
    folders (said: kept or empty) and choose the nodes' docker limits (nodelimits: probed
    on a rehearsal rack only). Creates no container and touches no GPU: `up` does it while
    the burn gate runs."""
    remove_leftovers(fleet, specs)
    try:
        said = make_folders(fleet, specs)
    except RuntimeError as error:
        raise StartFailed(str(error), fix="check the node's disk (df -h /var/lib/sparkrack)"
                          ) from None
    for line in said:
        on_event(line)
    return nodelimits.for_rack(fleet, inventory, [s.node for s in specs])


def create_all(fleet: Fleet, specs: tuple[LaunchSpec, ...], limits: nodelimits.Limits, *,
               on_event: Callable[[str], None] = lambda e: None) -> None:
    """Create (not start) every rank's container: a bad image or option fails before any
    rank runs. The docker options go through limits' fit (a rehearsal rack's are fitted to
    what the node's dockerd can give), and every deviation is reported."""
    errors = []
    created: list[LaunchSpec] = []
    deviations: set[str] = set()

    def one(spec: LaunchSpec) -> None:
        kwargs = docker_sdk_kwargs(spec)
        kwargs.pop("detach", None)
        kwargs, changes = limits.fit(spec.node, kwargs)
        deviations.update(changes)
        try:
            fleet.docker(spec.node).create(**kwargs)
            created.append(spec)
        except Exception as exc:
            errors.append(f"rank {spec.rank} on {spec.node}: {str(exc).splitlines()[0][:200]}")

    parallel(specs, one)
    for change in sorted(deviations):
        on_event(f"rehearsal rack: {change}")
    if errors:  # remove only what this start created: a name clash is someone else's container
        stop_ranks(fleet, [as_rank(s) for s in created], timeout=0)
        raise StartFailed("could not create the containers: " + "; ".join(sorted(errors)))


def start_group(fleet: Fleet, inventory: Inventory, specs: tuple[LaunchSpec, ...], *,
                serving: Serving, timeout: float | None = None,
                on_progress: Callable[[Progress], None] = lambda p: None,
                on_event: Callable[[str], None] = lambda e: None,
                limits: nodelimits.Limits | None = None,
                phases: Phases | None = None, allow_degraded: bool = False) -> float:
    """Create (after prepare, unless its limits are given), start in order, wait for
    readiness (the workers' by serving's worker_health_path: the lane's serving facts),
    judge what each rank's NCCL uses (lifecycle/ncclcheck.py). Returns seconds
    from first start to ready. On any failure (or KeyboardInterrupt) every rank is stopped
    and removed, then it raises."""
    phases = phases or Phases()
    if limits is None:
        with phases.timed("prepare"):
            limits = prepare(fleet, inventory, specs, on_event=on_event)
    with phases.timed("create"):
        create_all(fleet, specs, limits, on_event=on_event)
    ranks = [as_rank(s) for s in specs]
    try:
        with phases.timed("start"):
            for wave in start_order(list(specs), lambda s: s.rank):
                parallel(wave, lambda spec: fleet.docker(spec.node).start(spec.container_name))
                on_event(f"started rank(s) {', '.join(str(s.rank) for s in wave)}")
        with phases.timed("ready"):
            seconds = wait_ready(fleet, inventory, specs, ranks,
                                 timeout or specs[0].ready_timeout_s, on_progress,
                                 serving.worker_health_path)
        judge_nccl(fleet, inventory, ranks, on_event, allow_degraded)
        return seconds
    except BaseException as exc:
        on_event("stopping every rank of the failed start")
        lost = exc.node if isinstance(exc, NodeLost) else None
        stop_ranks(fleet, [r for r in ranks if r.node != lost], timeout=CLEANUP_STOP_TIMEOUT)
        if isinstance(exc, (KeyboardInterrupt, SparkrackError)):
            raise
        raise StartFailed(f"start failed: {type(exc).__name__}: {exc}") from None


def wait_ready(fleet: Fleet, inventory: Inventory, specs: tuple[LaunchSpec, ...],
               ranks: list[Rank], timeout: float, on_progress: Callable[[Progress], None],
               workers: str | None) -> float:
    """Poll containers and the head until healthy (the workers on their health path, None:
    they serve no HTTP); raise StartFailed naming the first failure."""
    head_spec = specs[0]
    head = inventory.node(head_spec.node)
    port = head_spec.ports["http"]
    started = time.monotonic()
    while True:
        # a short SSH round trip first: a lost node fails it within the connect timeout,
        # where a docker API call would wait for the command timeout
        for probe in fleet.run(["true"], timeout=LIVENESS_TIMEOUT):
            if probe.status != "ok":
                raise NodeLost(probe.node, probe.error or probe.status)
        states = refresh(fleet, ranks)
        gone = next((r for r in states if r.status == "unreachable"), None)
        if gone is not None:  # lost since the probe above: its rank cannot be stopped either
            raise NodeLost(gone.node, gone.error or "docker did not answer")
        dead = [r for r in states if not r.alive]
        if dead:
            raise rank_failed(dead[0], logs_tail(fleet, dead[0]))
        head_status = Endpoint(head, port).status(head_spec.health_path)
        joined = sum(parallel(specs[1:], lambda s: _worker_loaded(inventory, s, workers)))
        elapsed = time.monotonic() - started
        on_progress(Progress(len(states), len(states), joined + (head_status == 200), head_status, elapsed))
        if head_status == 200:
            return elapsed
        if elapsed > timeout:
            raise StartFailed(f"rank 0 on {head.name} not healthy after {timeout:.0f} s "
                              f"(last /health: {head_status or NOT_OPEN})")
        time.sleep(POLL_SECONDS)


def judge_nccl(fleet: Fleet, inventory: Inventory, ranks: list[Rank],
               on_event: Callable[[str], None], allow_degraded: bool) -> None:
    """Read what each rank's NCCL said it uses at init and judge it (ncclcheck): a rank on
    TCP or on fewer rails fails the start (StartFailed), or is said and kept with
    allow_degraded; ranks that said nothing are said once."""
    uses = dict(zip([(r.rank, r.node) for r in ranks], parallel(
        ranks, lambda r: nccl_use(split_timestamp(line)[1]
                                  for line in logs_tail(fleet, r, "all"))), strict=True))
    quiet = ncclcheck.silent(uses)
    if quiet:
        on_event(f"NCCL: {', '.join(quiet)} said nothing of its network (NCCL_DEBUG=INFO "
                 "is not in its environment): not judged")
    found = ncclcheck.degraded(inventory, uses)
    try:  # for `invoke status`; a start never fails for want of it
        record.write_nccl(fleet, inventory, ncclcheck.record_of(
            ranks[0].deployment if ranks else "", uses, found, allow_degraded))
    except SparkrackError as error:
        on_event(f"NCCL: not recorded for `invoke status`: {error.line()}")
    if found and not allow_degraded:
        raise StartFailed(f"NCCL runs degraded: {found[0]}"
                          + (f" (and {len(found) - 1} more rank(s))" if len(found) > 1 else ""))
    for line in found:
        on_event(f"NCCL runs degraded, started anyway (--allow-degraded): {line}")
    if not found and not quiet:
        said = {use.text() for use in uses.values()}
        on_event(f"NCCL: every rank on {' / '.join(sorted(said))}")


def rank_failed(rank: Rank, tail: list[str]) -> StartFailed:
    """A rank that stopped, in one line: the rank, its node, how it ended and the log line
    that says why (loglines.reason: an error or exception, never a start banner); its last
    log lines (tail, each with docker's timestamp) go with it for the failed record."""
    cause = reason(split_timestamp(line)[1] for line in tail)
    known = known_cause(cause, rank.node)
    why = (f"rank {rank.rank} on {rank.node} {rank.status}"
           + (f" (exit code {rank.exit_code})" if rank.exit_code is not None else "")
           + (f": {rank.error}" if rank.error else "") + (f": {known or cause}"
                                                           if cause else ""))
    failed = StartFailed(why, fix=f"`invoke logs --failed` shows rank {rank.rank}'s last lines"
                         if tail else None)
    if tail:
        failed.log_tail = {"rank": rank.rank, "node": rank.node, "lines": tail}
    return failed


def _worker_loaded(inventory: Inventory, spec: LaunchSpec, path: str | None) -> bool:
    """Whether a worker says it has loaded at path (the engine file's worker_health_path:
    SGLang's serve a stand-in /health); None: headless workers serve nothing, so their
    running container is all there is."""
    if path is None:
        return True
    return Endpoint(inventory.node(spec.node), spec.ports["http"]).status(path, 0.5) == 200
