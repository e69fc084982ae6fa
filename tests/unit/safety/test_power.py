"""Power arithmetic with the field report's numbers: 1,735 W uncapped tripped the 1,440 W
strip; capped, the rack draws 1,350-1,425 W."""

import dataclasses
from pathlib import Path

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory
from sparkrack.safety.power import MARGIN, OK, REFUSE, CapState, project_power

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def real_inventory():
    """The real-rack inventory: 1,440 W strip, 100 W margin, 178 W capped, 217 W uncapped."""
    return load_inventory(REPO / "inventory" / "rack")


def states(real_inventory, state, **others):
    """Every node in state, the nodes named in others (spark_03=...) in theirs."""
    return {node.name: others.get(node.name.replace("-", "_"), state)
            for node in real_inventory.nodes}


def with_vars(real_inventory, **changes):
    """The inventory with some rack vars changed."""
    return dataclasses.replace(real_inventory,
                               vars=dataclasses.replace(real_inventory.vars, **changes))


def test_every_node_capped_is_the_field_reports_capped_rack(real_inventory):
    budget = project_power(real_inventory, states(real_inventory, CapState.CAPPED))
    assert budget.projected_watts == 1424 and 1350 <= budget.projected_watts <= 1425
    assert budget.verdict == MARGIN and not budget.blocking
    assert budget.reason == ("projected 1,424 W: under the 1,440 W strip but inside its "
                             "100 W margin, every node capped")


def test_every_node_uncapped_is_the_rack_that_tripped_the_strip(real_inventory):
    budget = project_power(real_inventory, states(real_inventory, "uncapped"))
    assert budget.projected_watts == 1736  # field report: ~1,735 W sustained
    assert budget.verdict == REFUSE and budget.blocking
    names = ", ".join(node.name for node in real_inventory.nodes)
    assert budget.reason == f"projected 1,736 W > 1,440 W strip: {names} uncapped"


def test_one_uncapped_node_is_named(real_inventory):
    budget = project_power(real_inventory, states(real_inventory, CapState.CAPPED,
                                                  spark_03=CapState.UNCAPPED))
    assert budget.projected_watts == 7 * 178 + 217 == 1463
    assert budget.blocking
    assert budget.reason == "projected 1,463 W > 1,440 W strip: spark-03 uncapped"
    assert [d.watts for d in budget.nodes][1:4] == [178, 217, 178]


def test_unknown_and_missing_states_count_uncapped(real_inventory):
    given = states(real_inventory, CapState.CAPPED, spark_05=CapState.UNKNOWN, spark_02="uncapped")
    del given["spark-08"]
    budget = project_power(real_inventory, given)
    assert budget.projected_watts == 5 * 178 + 3 * 217
    assert budget.reason.endswith(": spark-02 uncapped; spark-05, spark-08 cap state unknown")


def test_an_uncapped_node_refuses_even_below_the_strip(real_inventory):
    light = with_vars(real_inventory, node_watts_capped=120, node_watts_uncapped=160)
    budget = project_power(light, states(light, "capped", spark_07="uncapped"))
    assert budget.verdict == REFUSE and budget.reason == (
        "spark-07 uncapped (counted at uncapped watts; projected 1,000 W <= 1,440 W strip)")


def test_capped_rack_over_the_strip_refuses(real_inventory):
    heavy = with_vars(real_inventory, node_watts_capped=190)
    budget = project_power(heavy, states(heavy, "capped"))
    assert budget.blocking
    assert budget.reason == "projected 1,520 W > 1,440 W strip: every node capped"


def test_below_the_margin_is_ok(real_inventory):
    roomy = with_vars(real_inventory, power_margin_watts=10)
    budget = project_power(roomy, states(roomy, "capped"))
    assert budget.verdict == OK and budget.limit_watts == 1430
    assert budget.reason == "projected 1,424 W <= 1,440 W strip - 10 W margin, every node capped"
    data = budget.as_dict()
    assert data["verdict"] == "ok" and data["projected_watts"] == 1424
    assert data["nodes"][0] == {"node": "spark-01", "state": "capped", "watts": 178}


def test_bad_input(real_inventory):
    with pytest.raises(UsageError, match="cap state given for unknown node 'spark-09'"):
        project_power(real_inventory, {"spark-09": "capped"})
    with pytest.raises(UsageError, match="unknown cap state 'locked'"):
        project_power(real_inventory, {"spark-01": "locked"})


@pytest.mark.parametrize("name", ["rack", "rehearsal"])
def test_the_per_node_figures_stay_conservative_against_public_readings(name):
    """A unit draws 60-100 W at the wall serving inference (public reviews), its GB10 is a
    140 W TDP part and its brick gives 240 W: the inventories' figures, from the field
    report's rack under long prefill, stay above the first two and within the brick."""
    found = load_inventory(REPO / "inventory" / name).vars
    assert 140 < found.node_watts_capped <= found.node_watts_uncapped <= 240
