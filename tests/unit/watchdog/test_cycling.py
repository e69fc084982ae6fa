"""When the watchdog may power-cycle a node (watchdog/cycling.py), table by table: the
decision on one sighting, the consecutive-sample count, the refusal of a cycle that could
not be finished; and the book of cycles as the state file keeps it (cyclebook.py). Pure."""

from __future__ import annotations

import pytest

from sparkrack.watchdog.cyclebook import CycleBook, CycleEntry, Pending
from sparkrack.watchdog.cycling import (
    CYCLE,
    HOLD,
    NONE,
    WAIT,
    CycleRules,
    Sighting,
    Streaks,
    cycle_refusal,
    decide,
)
from sparkrack.watchdog.policy import RESTART, STOP, Decision

NOW = 1_800_000_000.0
RULES = CycleRules(allowed=True, samples=3, window_s=24 * 3600)
BUDGET_OK = Decision(RESTART, "power cycle and restart 1 of 3 allowed in 30 min")
BUDGET_SPENT = Decision(STOP, "restart budget spent (3 of 3 in 30 min): not power-cycled")
LATCHED = Sighting("spark-03", "latched", True)
HOT = Sighting("spark-03", "latched", True, "its HW thermal slowdown at 99 C")
PENDING = Pending("spark-01", "latched", "record-1", "boot-1", NOW - 30, NOW - 40, 10,
                  "pdu:1", "sglang", "512k", "d1")


def book(*ago_outcome: tuple[float, str], pending: Pending | None = None) -> CycleBook:
    """A book with spark-03 cycled (seconds ago, outcome) each."""
    made = CycleBook(pending=pending)
    for ago, outcome in ago_outcome:
        made.add(CycleEntry("spark-03", "latched", NOW - ago, outcome, "spark-03: back", "d1"))
    return made


@pytest.mark.parametrize("sighting, streak, rules, cycles, budget, refusal, action, held", [
    # seen in enough consecutive polls, nothing against it: cycled
    (LATCHED, 3, RULES, book(), BUDGET_OK, None, CYCLE, ""),
    (LATCHED, 9, RULES, book((25 * 3600, "ok")), BUDGET_OK, None, CYCLE, ""),  # window past
    # not seen, or fewer polls than watchdog_power_cycle_samples: nothing yet
    (Sighting("spark-03", "latched", False), 0, RULES, book(), BUDGET_OK, None, NONE, ""),
    (LATCHED, 1, RULES, book(), BUDGET_OK, None, WAIT, ""),
    (LATCHED, 2, RULES, book(), BUDGET_OK, None, WAIT, ""),
    # heat explains the low clock: never, however long it stands
    (HOT, 50, RULES, book(), BUDGET_OK, None, NONE, ""),
    # installed without --allow-power-cycle: never (the finding names the command)
    (LATCHED, 50, CycleRules(False, 3, 3600), book(), BUDGET_OK, None, NONE, ""),
    # held back, each saying why
    (LATCHED, 3, RULES, book(pending=PENDING), BUDGET_OK, None, HOLD, "pending"),
    (LATCHED, 3, RULES, book((600, "ok")), BUDGET_OK, None, HOLD, "window"),
    (LATCHED, 3, RULES, book((600, "failed")), BUDGET_OK, None, HOLD, "window"),
    (LATCHED, 3, RULES, book(), BUDGET_SPENT, None, HOLD, "budget"),
    (LATCHED, 3, RULES, book(), BUDGET_OK, "no PDU outlet feeds spark-03", HOLD, "refused"),
    # the window wins over the budget: the operator reads the first reason
    (LATCHED, 3, RULES, book((600, "ok")), BUDGET_SPENT, None, HOLD, "window"),
])
def test_the_decision_on_one_sighting(sighting, streak, rules, cycles, budget, refusal, action,
                                      held):
    verdict = decide(sighting, streak, rules, cycles, NOW, budget, refusal)
    assert (verdict.action, verdict.held) == (action, held), verdict.reason
    assert verdict.node == "spark-03" and verdict.cause == "latched"


def test_what_each_verdict_says():
    say = lambda *args: decide(*args).reason  # noqa: E731
    assert say(LATCHED, 2, RULES, book(), NOW, BUDGET_OK) == (
        "spark-03: GPU latched in its low-clock state in 2 of the 3 consecutive polls a power "
        "cycle needs (watchdog_power_cycle_samples)")
    assert say(HOT, 9, RULES, book(), NOW, BUDGET_OK) == (
        "spark-03: GPU latched in its low-clock state? no: its HW thermal slowdown at 99 C "
        "explains the low clock; not power-cycled")
    window = say(LATCHED, 4, RULES, book((600, "ok")), NOW, BUDGET_OK)
    assert window.startswith("spark-03: GPU latched in its low-clock state for 4 polls; power "
                             "cycle held back: power-cycled ")
    assert window.endswith("(10 min ago) (latched, ok): at most one cycle per node in 1440 "
                           "min (watchdog_power_cycle_window_minutes); once its cause is "
                           "found: `invoke power-cycle -n spark-03`")
    assert say(LATCHED, 3, RULES, book(pending=PENDING), NOW, BUDGET_OK).endswith(
        "held back: the power cycle of spark-01 (latched), outlet pdu:1 cut; sglang 512k to "
        "start again is not finished")
    assert say(LATCHED, 3, RULES, book(), NOW, BUDGET_SPENT).endswith(
        "held back: restart budget spent (3 of 3 in 30 min): not power-cycled")
    assert say(LATCHED, 3, RULES, book(), NOW, BUDGET_OK) == (
        "spark-03: GPU latched in its low-clock state for 3 consecutive polls; power cycle "
        "and restart 1 of 3 allowed in 30 min")


@pytest.mark.parametrize("polls, counts", [
    # poll by poll: (node, seen, excuse); counts after the last poll
    ([[("a", True, None)]] * 3, {("a", "latched"): 3}),
    ([[("a", True, None)], [("a", True, None)], [], [("a", True, None)]],
     {("a", "latched"): 1}),  # a poll without it starts over
    ([[("a", True, None)], [("a", False, None)], [("a", True, None)]], {("a", "latched"): 1}),
    ([[("a", True, None)], [("a", True, "its SW thermal slowdown")], [("a", True, None)]],
     {("a", "latched"): 1}),  # heat in between starts over
    ([[("a", True, None), ("b", True, None)], [("b", True, None)]], {("b", "latched"): 2}),
    ([[("a", True, "its SW thermal slowdown")]] * 5, {}),
])
def test_a_cause_counts_only_in_consecutive_polls_with_nothing_explaining_it(polls, counts):
    streaks = Streaks()
    for poll in polls:
        found = streaks.see(Sighting(node, "latched", seen, excuse)
                            for node, seen, excuse in poll)
    assert found == counts


@pytest.mark.parametrize("node, own, keeps, fed, refused", [
    ("spark-03", "spark-01", None, True, None),  # another node: finished in-process
    ("spark-01", "spark-01", None, True, None),  # its own: finished after the boot
    ("spark-01", "spark-05", None, True, None),  # the head, the watchdog elsewhere
    ("spark-01", "spark-01", "it keeps no state file", True,
     "spark-01 is the watchdog's own node and it keeps no state file: the group would not "
     "be started again after the boot"),
    ("spark-03", "spark-01", "it keeps no state file", True, None),  # not its own: fine
    ("spark-03", None, None, True,
     "this watchdog does not know which node it runs on (no --node): a cycle of spark-03 "
     "could cut its own power with nothing to finish it; run `invoke watch.install` again"),
    ("spark-03", "spark-01", None, False,
     "no PDU outlet feeds spark-03 in the inventory (pdu: outlets)"),
])
def test_a_cycle_that_could_not_be_finished_is_refused_up_front(node, own, keeps, fed, refused):
    assert cycle_refusal(node, own, keeps, fed) == refused


def test_the_book_reads_back_what_it_wrote_and_skips_what_is_not_one():
    written = book((600, "ok"), (300, "failed"), pending=PENDING)
    written.hold("spark-03", "latched", "window", "held back: ...", NOW)
    again = CycleBook.from_dict(written.as_dict())
    assert again == written
    assert again.last("spark-03").outcome == "failed" and again.last("spark-02") is None
    for _ in range(10):
        again.add(CycleEntry("spark-03", "latched", NOW, "ok", "again"))
    assert len(again.nodes["spark-03"]) == 5  # the last five per node
    damaged = {"nodes": {"spark-03": [{"node": "spark-03"}, "x",
                                      {**written.as_dict()["nodes"]["spark-03"][0],
                                       "outcome": "maybe"}],
                         "spark-04": [{**written.as_dict()["nodes"]["spark-03"][0]}]},
               "held": ["x"], "pending": {"node": "spark-01"}}
    assert CycleBook.from_dict(damaged) == CycleBook()
    assert CycleBook.from_dict(None) == CycleBook()


def test_a_hold_is_new_once_while_it_stands():
    made = CycleBook()
    assert made.hold("spark-03", "latched", "window", "first", NOW) is True
    assert made.hold("spark-03", "latched", "window", "second", NOW + 1) is False
    assert made.held["spark-03 latched"]["since"] == NOW
    assert made.hold("spark-03", "latched", "budget", "third", NOW + 2) is True
    made.release({"spark-03 latched"})
    assert list(made.held) == ["spark-03 latched"]
    made.release(set())
    assert made.held == {}


def test_watch_status_shows_the_cycles_what_is_held_back_and_what_is_not_finished():
    import json

    from sparkrack.watchdog.status import cycle_lines, parse_cycles

    made = book((3600, "ok"), pending=PENDING)
    made.hold("spark-03", "latched", "window", "spark-03: ...; power cycle held back: ...", NOW)
    state = json.dumps({"verdicts": [], "power_cycles": made.as_dict()}).encode()
    lines = cycle_lines(parse_cycles(state), NOW)
    assert lines[0].startswith("power cycle of spark-03: ")
    assert lines[0].endswith(" (60 min ago), latched: ok: spark-03: back")
    assert lines[1].endswith(": spark-03: ...; power cycle held back: ...")
    assert lines[1].startswith("held back since ")
    assert lines[2] == ("not finished: the power cycle of spark-01 (latched), outlet pdu:1 "
                        "cut; sglang 512k to start again (the service finishes it when it "
                        "starts)")
    assert parse_cycles(b"{not json") == CycleBook() and parse_cycles(None) == CycleBook()
