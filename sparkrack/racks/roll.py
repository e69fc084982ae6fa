"""`fleet.roll`, `fleet.up`, `fleet.down`: the racks one at a time behind the router, each
step on the rack's own lock and audit log (docs/fleet.md#rolling).

A rack's roll: the other racks ready in the router and able to carry its requests
(capacity.py: else refused, saying why; a warning when requests will queue) -> drained
through the router (`DELETE /workers/{id}`), then its own in-flight count zero from rank
0's metrics -> `roll` with its gates -> a streamed smoke request straight to its head ->
registered again and ready -> a soak watching the router's error rate -> the next rack. A
failure puts the rack back on its last good deployment, registers it again and stops,
saying where.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.headapi import Endpoint, HeadError
from sparkrack.deployments.record import Deployment
from sparkrack.deployments.running import running
from sparkrack.engines import load_engine
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle import lanes
from sparkrack.lifecycle.drain import drain_api, in_flight
from sparkrack.oplock.audit import note
from sparkrack.racks.capacity import Lane, Verdict, decide
from sparkrack.racks.fleetfile import Fleet as FleetFile
from sparkrack.racks.rackstep import on_rack
from sparkrack.racks.router import Router, RouterError, Worker
from sparkrack.racks.status import head_api

READY_TIMEOUT_S = 60.0  # the router probes a registered head, detects its engine, marks it ready
SMOKE_TOKENS = 16


class FleetStopped(SparkrackError):
    """The fleet task stopped at a rack; the message says where and what runs there now."""


@dataclass
class RackReport:
    """One rack's part: seconds per step, what was drained, the soak's counts."""

    rack: str
    steps: dict[str, float] = field(default_factory=dict)  # drain, roll, smoke, register, soak
    drained: int | None = None  # requests in flight on the rack when the router stopped
    soak_requests: float = 0.0
    soak_failed: float = 0.0
    serving: str | None = None  # what it serves at the end
    warning: str | None = None  # the capacity check's: requests queue while it rolls

    def as_dict(self) -> dict:
        return {"rack": self.rack, "steps": {k: round(v, 2) for k, v in self.steps.items()},
                "drained": self.drained, "soak_requests": self.soak_requests,
                "soak_failed": self.soak_failed, "serving": self.serving,
                "warning": self.warning}


@dataclass
class Work:
    """What a fleet task works with."""

    fleet: FleetFile
    router: Router
    racks: list[Inventory]
    on_event: Callable[[str], None]

    def say(self, inventory: Inventory, text: str) -> None:
        self.on_event(f"{inventory.vars.rack_name}: {text}")


def work_of(fleet: FleetFile, on_event: Callable[[str], None]) -> Work:
    return Work(fleet, Router(fleet.router), fleet.inventories(), on_event)


def fleet_roll(fleet: FleetFile, engine: str, profile: str, *,
               on_event: Callable[[str], None] = lambda e: None) -> list[RackReport]:
    """Roll every rack of the fleet to engine's profile, one at a time; FleetStopped naming
    the rack where it stopped."""
    work = work_of(fleet, on_event)
    reports = []
    for inventory in work.racks:
        verdict = check_others(work, inventory)
        with on_rack(inventory, "fleet.roll", {"engine": engine, "profile": profile,
                                               "fleet": str(fleet.file)}, on_event=on_event):
            note(fleet_capacity={"carriers": verdict.said, "warning": verdict.warning})
            report = roll_rack(work, inventory, engine, profile)
            report.warning = verdict.warning
            reports.append(report)
    return reports


def fleet_up(fleet: FleetFile, engine: str, profile: str, *,
             on_event: Callable[[str], None] = lambda e: None) -> list[RackReport]:
    """Start engine's profile on every rack that serves nothing, one at a time: up, smoke,
    register, soak (a rack already serving is only registered)."""
    work = work_of(fleet, on_event)
    reports = []
    for inventory in work.racks:
        report = RackReport(inventory.vars.rack_name)
        with on_rack(inventory, "fleet.up", {"engine": engine, "profile": profile,
                                             "fleet": str(fleet.file)}, on_event=on_event):
            url, serving = _api(inventory)
            if url is None:
                began = time.monotonic()
                lanes.up(inventory, engine, profile, on_event=on_event)
                report.steps["up"] = time.monotonic() - began
                url, serving = _api(inventory)
            serve_again(work, inventory, report, url)
            report.serving = serving
        reports.append(report)
    return reports


def fleet_down(fleet: FleetFile, *, on_event: Callable[[str], None] = lambda e: None
               ) -> list[RackReport]:
    """Stop every rack, one at a time: drained through the router, then `down`."""
    work = work_of(fleet, on_event)
    reports = []
    for inventory in work.racks:
        report = RackReport(inventory.vars.rack_name)
        with on_rack(inventory, "fleet.down", {"fleet": str(fleet.file)}, on_event=on_event):
            url, _ = _api(inventory)
            if url is not None:
                drain_rack(work, inventory, url, report)
            for worker in _registered(work, inventory):  # a head that serves nothing now
                work.router.drain(worker.url)
                work.say(inventory, f"{worker.url} ({worker.status}) taken out of the router:"
                         " its head serves nothing")
            began = time.monotonic()
            lanes.down(inventory, on_event=on_event)
            report.steps["down"] = time.monotonic() - began
        reports.append(report)
    return reports


def check_others(work: Work, inventory: Inventory) -> Verdict:
    """Refused (nothing drained) unless every other rack serves and the router has it ready
    and healthy, and one of them serves the same model with at least this rack's context:
    they carry the fleet's requests while this one is out. The verdict, said; its warning
    when their concurrent-request limits are below the router's in-flight load now."""
    workers = work.router.workers()
    rolled = lane_of(inventory, workers)
    others = [lane_of(other, workers) for other in work.racks if other is not inventory]
    verdict = decide(rolled, others, sum(w.load for w in workers))
    if verdict.refusal:
        raise lanes.Refused(verdict.refusal, fix=verdict.fix)
    work.say(inventory, verdict.said)
    if verdict.warning:
        work.say(inventory, f"warning: {verdict.warning}")
    return verdict


def lane_of(inventory: Inventory, workers: list[Worker]) -> Lane:
    """What the rack serves now (its head, over SSH), its lane's context length and
    concurrent-request limit (the profile's flags with those roles) and its router state."""
    url, serving = _api(inventory)
    lane = Lane(inventory.vars.rack_name, inventory.vars.model_name, serving,
                router="not registered")
    found = next((w for w in workers if url and w.url.rstrip("/") == url), None)
    if found is not None:
        lane = replace(lane, router=found.status if found.healthy
                       else f"{found.status}, unhealthy")
    if serving is None:
        return lane
    engine, profile_name = serving.split(" ", 1)
    definition = load_engine(inventory.path, engine, inventory.vars.images)
    profile = definition.profiles.get(profile_name)  # None: renamed since it started
    if profile is None:
        return lane
    context, limit = (definition.setting(profile, role)
                      for role in ("context_length", "max_running_requests"))
    return replace(lane, context=int(context) if context and context.isdigit() else None,
                   limit=int(limit) if limit and limit.isdigit() else None,
                   limit_flag=definition.flag_roles.get("max_running_requests",
                                                        "its limit flag"))


def roll_rack(work: Work, inventory: Inventory, engine: str, profile: str) -> RackReport:
    """One rack's roll (module doc); FleetStopped, the rack back on its last good
    deployment and registered again, when a step fails."""
    report = RackReport(inventory.vars.rack_name)
    url, _ = _api(inventory)
    if url is None:
        raise FleetStopped(f"{report.rack} serves nothing: not rolled",
                           fix="invoke fleet.up first")
    previous = _last_good(inventory)
    drain_rack(work, inventory, url, report)
    began = time.monotonic()
    try:
        lanes.roll(inventory, engine, profile, on_event=work.on_event)
    except (lanes.RollFailed, lanes.Refused) as failure:  # it serves the last good again
        report.steps["roll"] = time.monotonic() - began
        back, serving = _api(inventory)
        if back is not None:
            serve_again(work, inventory, report, back, soak=False)
        raise FleetStopped(f"fleet.roll stopped at {report.rack}: {failure.line()}; it "
                           f"serves {serving or 'nothing'}, registered in the router again; "
                           "the racks after it were not rolled") from None
    report.steps["roll"] = time.monotonic() - began
    new_url, report.serving = _api(inventory)
    try:
        serve_again(work, inventory, report, new_url)
    except FleetStopped as stopped:
        put_back(work, inventory, previous, report)
        raise FleetStopped(f"fleet.roll stopped at {report.rack}: {stopped.line()}; it is back "
                           f"on {report.serving}, registered in the router again; the racks "
                           "after it were not rolled") from None
    return report


def drain_rack(work: Work, inventory: Inventory, url: str, report: RackReport) -> None:
    """The router stops sending the rack new requests (its drain); then wait for the rack's
    own in-flight count, from rank 0's metrics, to be zero within the fleet's drain budget
    (FleetStopped otherwise, the rack registered again)."""
    began = time.monotonic()
    work.router.drain(url)
    work.say(inventory, f"drained in the router ({url}): no new request goes there")
    budget = work.fleet.drain_budget_s
    with Fleet(inventory, [inventory.head]) as fleet:
        head = running(fleet, [inventory.head]).head
        api = drain_api(fleet, head) if head is not None else None
        first = left = in_flight(api) if api is not None else 0
        while left and time.monotonic() - began < budget:
            time.sleep(0.2)
            left = in_flight(api)
    report.drained = first
    report.steps["drain"] = time.monotonic() - began
    note(fleet_drain={"router": work.router.where, "url": url, "in_flight": first,
                      "left": left, "seconds": round(report.steps["drain"], 2)})
    if left:
        work.router.register(url)
        raise FleetStopped(f"{report.rack}: {left} request(s) still in flight "
                           f"{budget} s after the router's drain (rank 0's metrics); it is "
                           "registered again and serves on", fix="raise drain_budget_s in "
                           "the fleet file, or roll when the rack is less busy")
    work.say(inventory, f"{first or 0} in-flight request(s) finished in "
             f"{report.steps['drain']:.1f} s; rank 0 reports none left")


def serve_again(work: Work, inventory: Inventory, report: RackReport, url: str | None,
                soak: bool = True) -> None:
    """A streamed smoke request straight to the rack's head, registered in the router and
    ready, then a soak (FleetStopped on a failure, the rack left out of the router)."""
    if url is None:
        raise FleetStopped(f"{report.rack}: no rank 0 serves after the roll")
    began = time.monotonic()
    try:
        streamed = Endpoint(inventory.head, int(url.rsplit(":", 1)[1]),
                            inventory.vars.model_name).stream_chat(
            [{"role": "user", "content": "fleet smoke"}], SMOKE_TOKENS, timeout=60)
    except HeadError as error:
        raise FleetStopped(f"{report.rack}: the direct smoke request failed: "
                           f"{error.line()}") from None
    report.steps["smoke"] = time.monotonic() - began
    began = time.monotonic()
    try:
        work.router.register(url)
        work.router.wait_ready(url, READY_TIMEOUT_S)
    except RouterError as error:
        work.router.drain(url)
        raise FleetStopped(f"{report.rack}: not ready in the router: {error.line()}") from None
    report.steps["register"] = time.monotonic() - began
    work.say(inventory, f"smoke answered ({streamed.completion_tokens} tokens streamed), "
             f"registered at {url} and ready in the router")
    note(fleet_registered={"url": url, "smoke_tokens": streamed.completion_tokens})
    if soak:
        soak_rack(work, inventory, report, url)


def soak_rack(work: Work, inventory: Inventory, report: RackReport, url: str) -> None:
    """Watch the router's request counters for the fleet's soak time: FleetStopped (the rack
    drained from the router) when failed / all passes max_error_rate."""
    began = time.monotonic()
    before = work.router.counts()
    while time.monotonic() - began < work.fleet.soak_s:
        time.sleep(min(1.0, work.fleet.soak_s))
    requests, failed = work.router.counts().rate_since(before)
    report.soak_requests, report.soak_failed = requests, failed
    report.steps["soak"] = time.monotonic() - began
    note(fleet_soak={"seconds": round(report.steps["soak"], 2), "requests": requests,
                     "failed": failed})
    rate = failed / requests if requests else 0.0
    if rate > work.fleet.max_error_rate:
        work.router.drain(url)
        raise FleetStopped(f"{report.rack}: {failed:g} of {requests:g} requests failed at the "
                           f"router during the {work.fleet.soak_s} s soak (max_error_rate "
                           f"{work.fleet.max_error_rate:g})")
    work.say(inventory, f"soak {report.steps['soak']:.0f} s: {requests:g} request(s) through "
             f"the router, {failed:g} failed")


def put_back(work: Work, inventory: Inventory, previous: Deployment | None,
             report: RackReport) -> None:
    """The rack back on its last good deployment from before the roll, registered again."""
    if previous is None:
        report.serving = None
        return
    work.say(inventory, f"putting back {previous.describe()}")
    url, _ = _api(inventory)
    if url is not None:
        work.router.drain(url)
    lanes.roll(inventory, previous.engine, previous.profile, on_event=work.on_event)
    back, report.serving = _api(inventory)
    serve_again(work, inventory, report, back, soak=False)


def _registered(work: Work, inventory: Inventory) -> list[Worker]:
    """The router's workers at the rack's head address that are not draining yet."""
    return [w for w in work.router.workers() if w.status != "draining"
            and urlsplit(w.url).hostname == inventory.head.address]


def _api(inventory: Inventory) -> tuple[str | None, str | None]:
    """(the rack's head API URL, "engine profile") of what runs there (None, None: nothing)."""
    with Fleet(inventory, [inventory.head]) as fleet:
        url, serving, _ = head_api(inventory, fleet)
    return url, serving


def _last_good(inventory: Inventory) -> Deployment | None:
    with Fleet(inventory, [inventory.head]) as fleet:
        return record.read(fleet, inventory).get("last-good")
