"""fleet.roll's first step: the other racks must be ready in the router and able to carry
the rolled rack's requests (same model, at least its context), else refused before any
drain; a warning when their concurrent-request limits are below the router's load."""

from pathlib import Path

import pytest

from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.racks import roll
from sparkrack.racks.capacity import Lane, decide
from sparkrack.racks.roll import Work, check_others
from sparkrack.racks.router import Worker

REPO = Path(__file__).resolve().parents[3]
M = "GLM-5.3"


def lane(rack="rack2", model=M, serving="sglang 512k", context=524288, limit=2,
         router="ready", flag="--max-running-requests") -> Lane:
    return Lane(rack, model, serving, context, limit, flag, router)


ROLLED = lane("rack1")


@pytest.mark.parametrize("others, in_flight, refusal, warning", [
    # ready, same model, same context, limit covers the load: no word
    ([lane()], 2, None, None),
    # no other rack at all
    ([], 0, "rack1 not taken out of the fleet: no other rack", None),
    # the other rack is not ready, or serves nothing
    ([lane(router="draining")], 0, "rack1 not taken out of the fleet: rack2 serves sglang "
     "512k of GLM-5.3 (context 524288, 2 at once), draining in the router", None),
    ([lane(router="not registered")], 0, "not registered in the router", None),
    ([lane(serving=None)], 0, "rack1 not taken out of the fleet: rack2 serves nothing", None),
    # one ready and one not: still refused, naming the one
    ([lane(), lane("rack3", router="ready, unhealthy")], 0,
     "rack1 not taken out of the fleet: rack3 serves", None),
    # another model
    ([lane(model="Other-1")], 0, "rack1 not taken out of the fleet: no other rack serves "
     "GLM-5.3 with context 524288 as rack1 does (sglang 512k); rack2 serves sglang 512k of "
     "Other-1", None),
    # a shorter context
    ([lane(serving="sglang 131k-throughput", context=131072)], 0,
     "no other rack serves GLM-5.3 with context 524288 as rack1 does", None),
    # a longer context, or the model's own: fits
    ([lane(serving="vllm 1m-nvfp4", context=1048576, limit=None)], 4, None, None),
    ([lane(context=None)], 2, None, None),
    # one of two carries it: the short one is not counted in the limit either
    ([lane(context=131072, limit=16), lane("rack3")], 8, None,
     "6 request(s) will queue on rack3 while rack1 rolls: 8 in flight in the router, rack3 "
     "runs 2 at once (--max-running-requests)"),
    # limits below the load: warned, not refused
    ([lane()], 8, None, "6 request(s) will queue on rack2 while rack1 rolls"),
    ([lane(), lane("rack3", serving="vllm 512k", limit=4, flag="--max-num-seqs")], 7, None,
     "1 request(s) will queue on rack2, rack3 while rack1 rolls: 7 in flight in the router, "
     "rack2, rack3 run 6 at once (--max-num-seqs / --max-running-requests)"),
    # a limit the engine sizes itself: no estimate, no warning
    ([lane(limit=None)], 100, None, None),
])
def test_the_decision(others, in_flight, refusal, warning):
    verdict = decide(ROLLED, others, in_flight)
    if refusal is None:
        assert verdict.refusal is None, verdict
    else:
        assert verdict.refusal is not None and refusal in verdict.refusal, verdict
        assert verdict.fix and verdict.warning is None
    if warning is None:
        assert verdict.warning is None, verdict
    else:
        assert verdict.warning is not None and warning in verdict.warning, verdict


def test_the_rolled_rack_with_the_models_own_context_needs_one_as_long():
    rolled = lane("rack1", context=None)
    assert decide(rolled, [lane(context=1048576)], 0).refusal.endswith(
        "no other rack serves GLM-5.3 with the model's own context as rack1 does "
        "(sglang 512k); rack2 serves sglang 512k of GLM-5.3 (context 1048576, 2 at once), "
        "ready in the router")
    assert decide(rolled, [lane(context=None)], 0).refusal is None


class FakeRouter:
    def __init__(self, workers):
        self._workers = workers

    def workers(self):
        return self._workers


@pytest.fixture
def fleet_of_two(monkeypatch):
    """The two rehearsal inventories (shipped profiles), what their heads serve patched in
    (no SSH), a router with both ready: (set what each serves, the work, its events)."""
    racks = [load_inventory(REPO / "inventory" / name) for name in ("rehearsal", "rehearsal-2")]
    serving: dict = {}

    def api(inventory):
        found = serving[inventory.vars.rack_name]
        return (None, None) if found is None else (found[0], found[1])

    monkeypatch.setattr(roll, "_api", api)
    events: list[str] = []

    def make(one: str, two: str, load: int) -> Work:
        for inventory, what in zip(racks, (one, two), strict=True):
            port = 30000 if what.startswith("sglang") else 8000
            serving[inventory.vars.rack_name] = (f"http://{inventory.head.address}:{port}", what)
        workers = [Worker(str(n), url, "ready", True, load // 2)
                   for n, (url, _) in enumerate(serving.values())]
        return Work(None, FakeRouter(workers), racks, events.append)

    return racks, make, events


def test_fleet_roll_refuses_a_rack_whose_context_no_other_rack_serves(fleet_of_two):
    """Rack 2 on SGLang's 131K lane cannot take rack 1's 512K requests: refused before any
    drain, naming both."""
    racks, make, events = fleet_of_two
    with pytest.raises(lanes.Refused) as refused:
        check_others(make("sglang 512k", "sglang 131k-throughput", 0), racks[0])
    assert refused.value.line() == (
        "rehearsal not taken out of the fleet: no other rack serves GLM-5.3 with context "
        "524288 as rehearsal does (sglang 512k); rehearsal-2 serves sglang 131k-throughput of "
        "GLM-5.3 (context 131072, 2 at once), ready in the router (roll another rack "
        "first, or put one on a lane of GLM-5.3 with at least that context; invoke "
        "fleet.status)"), refused.value.line()
    assert events == []
    # the other way round it fits: rack 2's 131K requests fit rack 1's 512K
    assert check_others(make("sglang 512k", "sglang 131k-throughput", 0), racks[1]).refusal \
        is None


def test_fleet_roll_warns_when_the_other_racks_limits_are_below_the_load(fleet_of_two):
    """Eight requests in flight and rack 2 running two at once (the SGLang 512k lane's
    --max-running-requests): said, not refused; vLLM's lane sets no --max-num-seqs (the
    engine sizes it), so no estimate there."""
    racks, make, events = fleet_of_two
    verdict = check_others(make("sglang 512k", "sglang 512k", 8), racks[0])
    assert verdict.warning == ("6 request(s) will queue on rehearsal-2 while rehearsal rolls: "
                               "8 in flight in the router, rehearsal-2 runs 2 at once "
                               "(--max-running-requests)")
    assert events == [
        "rehearsal: while rehearsal rolls: rehearsal-2 serves sglang 512k of GLM-5.3 (context "
        "524288, 2 at once), ready in the router; 8 request(s) in flight in the router",
        f"rehearsal: warning: {verdict.warning}"]
    events.clear()
    assert check_others(make("sglang 512k", "vllm 512k", 8), racks[0]).warning is None
    assert events == ["rehearsal: while rehearsal rolls: rehearsal-2 serves vllm 512k of "
                      "GLM-5.3 (context 524288), ready in the router; 8 request(s) in flight "
                      "in the router"]


def test_fleet_down_takes_each_rack_down_in_turn_and_says_which(monkeypatch):
    """fleet.down over the shipped rehearsal fleet, neither head serving (no SSH: the rack
    step, the head's answer and `down` stood in for): each rack is taken down in the fleet
    file's order, one report each. Once, after the burn left its parameters, fleet.down
    built its work with a burn still passed and failed with a TypeError before any rack."""
    from contextlib import nullcontext

    from sparkrack.racks.fleetfile import load_fleet

    fleet = load_fleet(REPO / "inventory" / "fleet-rehearsal.yml")
    downs, steps = [], []
    monkeypatch.setattr(roll, "on_rack", lambda inventory, task, args, on_event: (
        steps.append((inventory.vars.rack_name, task)) or nullcontext()))
    monkeypatch.setattr(roll, "_api", lambda inventory: (None, None))
    monkeypatch.setattr(roll, "_registered", lambda work, inventory: [])
    monkeypatch.setattr(lanes, "down", lambda inventory, on_event: downs.append(
        inventory.vars.rack_name))
    reports = roll.fleet_down(fleet)
    assert downs == ["rehearsal", "rehearsal-2"] == [report.rack for report in reports]
    assert steps == [("rehearsal", "fleet.down"), ("rehearsal-2", "fleet.down")]
    assert all(set(report.steps) == {"down"} for report in reports)
