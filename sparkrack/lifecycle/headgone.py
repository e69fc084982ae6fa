"""Is the head really gone? Break-glass goes ahead only when the head answers nothing at all,
here and from every worker that answers, for a whole grace period
(docs/operators.md#break-glass-the-head-is-gone). `judge` is the decision on one round,
pure; `confirm_gone` runs the rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sparkrack import remote
from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.fleet.reach import REFUSED, SESSION, Reach, reach
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Inventory, Node
from sparkrack.transfer.chain import DEFAULT_PYTHON

GRACE_S = 30.0  # the head silent everywhere this long before anything is stopped
ROUND_EVERY_S = 5.0
KNOCK_TIMEOUT_S = 2.0  # one TCP connect from a worker (a live host answers in milliseconds)
ANSWERS = ("accepted", "refused")  # what a worker's knock says when the head is there
STOPPED_NOTHING = "break-glass stopped nothing: it is only for a head that answers nothing, " \
    "here and from its workers"


class HeadNotGone(SparkrackError):
    """The head (or some node's view of it) still answers: break-glass refuses. Exit 2."""

    exit_code = 2


@dataclass(frozen=True)
class Look:
    """One round: the head from here, and what each worker that answered found."""

    here: Reach
    seen: Mapping[str, Mapping[str, str]]  # worker -> {ADDR:PORT: knock state}
    missing: Mapping[str, str] = field(default_factory=dict)  # worker -> why it did not answer


@dataclass(frozen=True)
class Gone:
    """The head judged gone: the last round, and how long it was watched."""

    look: Look
    seconds: float
    rounds: int


def targets(head: Node) -> list[str]:
    """ADDR:PORT of the head's SSH port on its management and fabric addresses."""
    addresses = dict.fromkeys(a for a in (head.address, head.roce_addr) if a)
    return [f"[{a}]:{head.port}" if ":" in a else f"{a}:{head.port}" for a in addresses]


def judge(head: str, look: Look) -> HeadNotGone | None:
    """The refusal one round calls for, or None while the head is silent everywhere."""
    here = look.here
    if here.state == SESSION:
        return HeadNotGone(f"{head} (the head) answers: the rack lock can be taken",
                           fix="invoke down (break-glass is for a head that is gone)")
    if here.state == REFUSED:
        return HeadNotGone(f"{head} (the head) is there but refuses this machine: {here.why}",
                           fix=f"{STOPPED_NOTHING}; once this machine gets in, invoke down")
    for worker, found in sorted(look.seen.items()):
        for target, state in sorted(found.items()):
            if state in ANSWERS:
                return HeadNotGone(
                    f"{head} (the head) does not answer this machine ({here.why}), but "
                    f"{worker} reaches it ({target} {state} the connection): a partition "
                    "between this machine and the head, not a lost head",
                    fix=f"{STOPPED_NOTHING}; restore this machine's path to {head} (or its "
                    "ansible_host, if that is wrong), then invoke down")
            if state != "silent":
                return HeadNotGone(f"{worker} cannot tell whether it reaches {head} "
                                   f"({target}: {state})", fix=STOPPED_NOTHING)
    return None


def look_once(inventory: Inventory, fleet: Fleet) -> Look:
    """One round: a login to the head from here, a knock from every worker of fleet."""
    head = inventory.head
    here = reach(head, inventory.known_hosts_path)
    argv = remote.argv(DEFAULT_PYTHON, "knock", f"{KNOCK_TIMEOUT_S:g}", *targets(head))
    seen, missing = {}, {}
    for result in fleet.run(argv, timeout=KNOCK_TIMEOUT_S + 15):
        found = last_json_object(result.stdout) if result.ok else {}
        if found:
            seen[result.node] = {str(k): str(v) for k, v in found.items()}
        elif result.status == "unreachable":
            missing[result.node] = result.error or result.status
        else:
            seen[result.node] = {t: f"knock failed: {result.error or result.status}"
                                 for t in targets(head)}
    return Look(here, seen, missing)


def confirm_gone(inventory: Inventory, *, grace: float = GRACE_S,
                 on_event: Callable[[str], None] = lambda e: None,
                 look: Callable[[], Look] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> Gone:
    """Watch the head for grace seconds (one round at least): Gone when it answered nothing
    in any round, here or from any worker; HeadNotGone at the first answer."""
    head = inventory.head.name
    workers = [node for node in inventory.nodes if node.name != head]
    with Fleet(inventory, workers) as fleet:
        ask = look or (lambda: look_once(inventory, fleet))
        started, rounds = clock(), 0
        while True:
            seen = ask()
            rounds += 1
            refusal = judge(head, seen)
            if refusal is not None:
                raise refusal
            waited = clock() - started
            if waited >= grace:
                return Gone(seen, waited, rounds)
            if rounds == 1:
                on_event(f"{head} (the head) does not answer ({seen.here.why}); watching it "
                         f"for {grace:g} s, from here and from {len(seen.seen)} worker(s), "
                         "before anything is stopped")
            sleep(min(ROUND_EVERY_S, grace - waited))


__all__ = ["GRACE_S", "Gone", "HeadNotGone", "Look", "confirm_gone", "judge", "look_once",
           "targets"]
