"""The watchdog's policy: stop by default, restart within a budget, then stop and say why."""

from sparkrack.inventory.schema import RackVars
from sparkrack.watchdog.policy import RESTART, STOP, RestartBudget


def test_default_policy_stops():
    budget = RestartBudget.from_vars(RackVars())
    assert (budget.action, budget.budget, budget.window_s) == ("stop", 3, 1800.0)
    assert budget.decide(0).action == STOP
    assert budget.decide(0).reason == "watchdog_action is stop"


def test_restart_until_the_budget_is_spent_then_stop_and_say_why():
    budget = RestartBudget.from_vars(RackVars(watchdog_action="restart", watchdog_restart_budget=2,
                                              watchdog_restart_window_minutes=10))
    first = budget.decide(1000)
    assert (first.action, first.reason) == (RESTART, "restart 1 of 2 allowed in 10 min")
    budget.record(1000)
    assert budget.decide(1100).reason == "restart 2 of 2 allowed in 10 min"
    budget.record(1100)
    spent = budget.decide(1200)
    assert spent.action == STOP
    assert spent.reason == ("restart budget spent: 2 restarts in the last 10 min "
                            "(watchdog_restart_budget: 2 per 10 min); stopping the group "
                            "instead: find the cause, then `invoke up`")
    # the window slides: the first restart falls out of it 10 minutes later
    assert budget.decide(1000 + 600).action == RESTART
    assert budget.decide(1000 + 599).action == STOP


def test_budget_zero_never_restarts():
    budget = RestartBudget(action=RESTART, budget=0)
    assert budget.decide(0).reason == "watchdog_restart_budget is 0: never restart"


def test_restarts_are_kept_across_a_service_restart_within_the_window():
    budget = RestartBudget(action=RESTART, budget=2, window_s=600)
    budget.record(100)
    budget.record(500)
    again = RestartBudget(action=RESTART, budget=2, window_s=600)
    again.load(budget.as_dict(), now=750)  # 100 is out of the window by then
    assert again.restarts == [500]
    again.load({"restarts": ["x", 640, -5]}, now=650)
    assert again.restarts == [640]
    again.load("garbage", now=650)
    assert again.restarts == []
