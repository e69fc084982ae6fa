"""The watchdog service's loop: follow the deployment records, guard a ready group, act by
the inventory's policy, and keep the metrics current (docs/watchdog.md#the-watchdog-service).
The rack is reached through a `Rack` (rack.FleetRack on a real one; fakes in the tests).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkrack.core.atomic import write_atomically
from sparkrack.core.errors import SparkrackError
from sparkrack.watchdog.cyclebook import CycleBook
from sparkrack.watchdog.cycler import Cycler
from sparkrack.watchdog.cycling import CycleRules, samples_for
from sparkrack.watchdog.metrics import WatchdogMetrics, update
from sparkrack.watchdog.policy import RESTART, RestartBudget
from sparkrack.watchdog.railwatch import RailCollector, RailWatch
from sparkrack.watchdog.silence import WEDGED, judge
from sparkrack.watchdog.snapshot import snapshot
from sparkrack.watchdog.watch import Poll, tend_gpus

log = logging.getLogger("sparkrack.watchdog")

FACTS_EVERY_S = 5.0  # between facts round trips (nvidia-smi, systemctl) for the metrics
VERDICTS_KEPT = 20  # verdict changes kept in the state file for `watch.status`
PACES_SAVED_EVERY_S = 60.0  # the lanes' pace baselines written to the state file at most


class Group(Protocol):
    """What the loop needs of a guarded group (watchdog.watch.GroupWatch)."""

    unwatched: str | None  # why progress cannot be read (GroupWatch.unwatched)

    def poll(self) -> Any: ...
    def stop(self, lost: dict[str, str] | None = None, remove: bool = True) -> dict[str, str]: ...
    def ratcheting(self) -> set[str]: ...
    def left_behind(self, lost: dict[str, str]) -> list[Any]: ...


class Rack(Protocol):
    """What the loop needs of the rack (rack.FleetRack)."""

    def records(self) -> dict[str, Any]: ...
    def ranks(self) -> tuple[list[Any], dict[str, str]]: ...
    def group_watch(self, ranks: list[Any], deployment: Any) -> Group: ...
    def facts(self) -> dict[str, Any]: ...
    def restart(self, deployment: Any) -> Any: ...
    def stop_left_behind(self, ranks: list[Any]) -> tuple[list[Any], dict[str, str]]: ...
    def lock_holder(self) -> str | None: ...
    def record_action(self, deployment: Any, poll: Any, acted: str) -> list[str]: ...
    def power_cycle(self, node: str, cause: str, deployment: Any, own: str | None,
                    keep: Callable[[Any], None]) -> Any: ...  # nodecycle.Cycled
    def finish_cycle(self, pending: Any, own: str | None) -> Any: ...  # nodecycle.Cycled
    def strip(self) -> Any: ...  # the PDU's reading (pdu.nodeoutlets.StripReading) or None
    def kernel_answers(self, node: str) -> str: ...  # a TCP try of its SSH port (silence.py)


@dataclass
class Step:
    """What one step decided, for the journal, the state file and the tests."""

    verdict: str  # idle | blind | starting | stepped-aside | guarding | stopped | restarted
    #               | restart-failed | down | power-cycled | power-cycle-failed
    detail: str = ""
    acted: bool = False


@dataclass
class Watchdog:
    """The loop's state between steps."""

    inventory: Any
    rack: Rack
    metrics: WatchdogMetrics = field(default_factory=WatchdogMetrics)
    budget: RestartBudget | None = None
    state_file: Path | None = None
    facts_every: float = FACTS_EVERY_S
    allow_power_cycle: bool = False  # watch.install --allow-power-cycle (watchdog/cycling.py)
    node: str | None = None  # the node this service runs on (--node)
    keeps: Callable[[], str | None] | None = None  # nodecycle.keeps_problem, for the tests
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = RestartBudget.from_vars(self.inventory.vars)
        self.group: Group | None = None
        self.guarded: str | None = None  # deployment id of the group being guarded
        self.stopped: dict[str, str] = {}  # deployment id: why the watchdog took it down
        self.stalls: dict[str, tuple[str, int]] = {}  # deployment id: (culprit node, rank) of its stall
        self.paces: dict[str, dict] = {}  # "engine profile": its pace baselines (pace.py)
        self._paces_saved, self._paces_dirty = float("-inf"), False  # on disk when, since
        self.facts: dict[str, Any] = {}
        self.strip: Any = None  # the PDU's last reading, with the facts
        self.containers: tuple[list[Any], dict[str, str]] = ([], {})
        self.facts_at: float | None = None
        self._guarded_deployment: Any = None
        self.last: Step | None = None
        self.verdicts: list[dict] = []
        self.detection_to_stopped: float | None = None
        self.left_behind: list[Any] = []  # ranks on nodes lost when their group was stopped
        self._unwatched_said: str | None = None  # the last "progress not readable" logged
        self.standing: set[tuple[str, str]] = set()  # GPU findings said, until they clear
        pdu = self.inventory.vars.pdu
        self.cycler = Cycler(CycleRules.from_vars(self.inventory.vars, self.allow_power_cycle),
                             self.node, self.keeps or self._keeps,
                             lambda node: pdu is not None and pdu.outlet_of(node) is not None)
        self.rails = RailWatch(self.inventory, self.facts_every)  # what each rank's NCCL uses
        self.metrics.registry.register(RailCollector(self.rails))
        self.metrics.pace_of = lambda: getattr(self.group, "pace", None)  # the slow rack
        self._load_state()

    # --- One step ----------------------------------------------------------------------

    def step(self) -> Step:
        """One poll of the rack: decide, act if needed, update the metrics."""
        started = self.monotonic()
        self._refresh_facts(started)
        if self.cycler.book.pending is not None:  # cut before this service started: finish it
            step = self._finish_pending()
            self._publish(None, None, step, None, None, self.monotonic() - started)
            self._say(step)
            return step
        if self.left_behind:
            self._stop_left_behind()
        poll = None
        try:
            records = self.rack.records()
        except SparkrackError as error:
            records = None
            records_error = error.line()
        current = records.get("current") if records else None
        last_good = records.get("last-good") if records else None
        if records is not None:  # forget the groups stopped before this deployment
            self.stopped = {k: v for k, v in self.stopped.items()
                            if current is not None and k == current.deployment_id}
            self.stalls = {k: v for k, v in self.stalls.items()
                           if current is not None and k == current.deployment_id}
        holder = self.rack.lock_holder()
        if records is None and self.group is None:  # not idle: it cannot tell what runs
            step = Step("blind", f"deployment records unreadable: {records_error}; "
                        "retrying every poll")
        elif records is not None and current is None:
            self._forget_group()
            step = Step("idle", "no engine deployment is current")
        elif holder:
            self._forget_group()
            step = Step("stepped-aside", f"the rack lock is held by {holder}")
        elif current is not None and current.deployment_id in self.stopped:
            step = Step("down", f"{current.deployment_id} stopped by the watchdog: "
                        f"{self.stopped[current.deployment_id]}; `invoke up` or `invoke down`")
        elif current is not None and (last_good is None
                                      or last_good.deployment_id != current.deployment_id):
            self._forget_group()
            step = Step("starting", f"{current.deployment_id} not yet ready (no readiness "
                        "and smoke request recorded): not guarded")
        else:
            deployment = current if current is not None else self._guarded_deployment
            step, poll = self._guard(deployment)
        if records is None:  # guarding on while the head does not answer: as last read
            current = last_good = self._guarded_deployment
        if step.acted:  # list the containers again next step: they just changed
            self.facts_at = None
        if step.verdict != "guarding":  # a hold stands only while its group is guarded
            self.cycler.book.held = {}
        self._publish(current, last_good, step, poll, holder, self.monotonic() - started)
        self._say(step)
        return step

    def _guard(self, deployment) -> tuple[Step, Any]:
        """Poll the ready group (picking it up first if new); act when it is broken."""
        if self.guarded != deployment.deployment_id or self.group is None:
            ranks, unreachable = self.rack.ranks()
            mine = [r for r in ranks if r.deployment == deployment.deployment_id]
            broken = self._incomplete(mine, unreachable)
            if broken:
                return self._act(deployment, broken, self.monotonic(), {}, mine,
                                 Poll(failure=broken)), None
            self.group = self.rack.group_watch(mine, deployment)
            if hasattr(self.group, "pace"):  # the lane's baselines, kept across its starts
                self.group.pace.restore(self.paces.get(_lane(deployment)))
            self.guarded = deployment.deployment_id
            self._guarded_deployment = deployment
            log.info("guarding %s %s (%s): %d ranks", deployment.engine, deployment.profile,
                     deployment.deployment_id, len(mine))
        poll = self.group.poll()
        if hasattr(self.group, "pace"):
            self._keep_pace(_lane(deployment), self.group.pace.export())
        unwatched = self.group.unwatched
        if unwatched and unwatched != self._unwatched_said:
            log.warning("%s", unwatched)
            self._unwatched_said = unwatched
        for node, warning in poll.warnings:
            self.metrics.count_ratchet_warning(node)
            log.warning("%s: %s", node, warning)
        if not poll.failure:
            lines, made = tend_gpus(self.group, poll, self.standing, "watchdog")
            for line in lines:
                (log.warning if line.startswith("warning: ") else log.info)(
                    "%s", line.removeprefix("warning: "))
            for done in made:
                self.metrics.count_cap_reapplied(done.node, done.took)
            verdict = self._consider(poll)
            if verdict is not None:
                return self._power_cycle(deployment, verdict), poll
        if poll.failure and poll.lost:
            step = self._silent(deployment, poll)
            if step is not None:
                return step, poll
        if poll.failure:
            return self._act(deployment, poll.failure, poll.detected or self.monotonic(),
                             poll.lost, None, poll), poll
        return Step("guarding", f"{deployment.engine} {deployment.profile} "
                    f"({deployment.deployment_id}): {len(poll.states)} ranks running"), poll

    def _keep_pace(self, lane: str, kept: dict) -> None:
        """Keep a lane's pace baselines, on disk at most every PACES_SAVED_EVERY_S."""
        if kept != self.paces.get(lane):
            self.paces[lane], self._paces_dirty = kept, True
        if self._paces_dirty and self.monotonic() - self._paces_saved >= PACES_SAVED_EVERY_S:
            self._save_state()

    def _incomplete(self, mine: list, unreachable: dict[str, str]) -> str | None:
        """Why the recorded group is not whole when first picked up (or None)."""
        for node in self.inventory.nodes:
            if node.name in unreachable:
                return f"node {node.name} lost ({unreachable[node.name]})"
            rank = next((r for r in mine if r.node == node.name), None)
            if rank is None:
                return f"rank {node.rank} container on {node.name} is gone"
            if not rank.alive:
                return f"rank {rank.rank} on {node.name} {rank.status} (exit code {rank.exit_code})"
        return None

    def _act(self, deployment, failure: str, detected: float, lost: dict[str, str],
             ranks: list | None, poll: Poll) -> Step:
        """Stop the broken group at once; then restart it if the policy and budget allow;
        write what was done and why to the audit log."""
        step = self._stop_or_restart(deployment, failure, detected, lost, ranks)
        if poll.stall is not None:
            self.metrics.count_stall()
            culprit = poll.stall.culprit
            self.stalls[deployment.deployment_id] = (
                (culprit.node, culprit.rank) if culprit is not None else ("", -1))
        for problem in self.rack.record_action(deployment, poll, step.verdict):
            log.warning("%s", problem)
        return step

    def _stop_or_restart(self, deployment, failure: str, detected: float,
                         lost: dict[str, str], ranks: list | None) -> Step:
        decision = self.budget.decide(self.clock())
        log.error("group broken: %s; stopping every rank (%s)", failure, decision.reason)
        group = self.group if ranks is None else self.rack.group_watch(ranks, deployment)
        errors = group.stop(lost, remove=False)  # their logs stay for `invoke logs`
        self.detection_to_stopped = self.monotonic() - detected
        self.left_behind += group.left_behind(lost)
        if lost:
            log.warning("%s did not answer: its rank(s) still run there; stopped as soon as it "
                        "answers", ", ".join(sorted(lost)))
        for where, why in errors.items():
            log.error("could not stop %s: %s", where, why)
        self._forget_group()
        if decision.action != RESTART:
            self.metrics.count_action("stop")
            self.stopped[deployment.deployment_id] = f"{failure}; {decision.reason}"
            self._save_state()
            return Step("stopped", f"{failure}; stopped in {self.detection_to_stopped:.1f} s "
                        f"({decision.reason})", acted=True)
        self.budget.record(self.clock())
        self._save_state()
        log.warning("restarting %s %s in order (%s)", deployment.engine, deployment.profile,
                    decision.reason)
        try:
            self.rack.restart(deployment)
        except Exception as error:  # the restart's own gates or start failed: nothing runs
            why = error.line() if isinstance(error, SparkrackError) else f"{error!r}"
            self.metrics.count_action("restart_failed")
            self.stopped[deployment.deployment_id] = f"{failure}; the restart failed: {why}"
            self._save_state()
            return Step("restart-failed", f"{failure}; restart failed: {why}", acted=True)
        self.metrics.count_action("restart")
        return Step("restarted", f"{failure}; stopped in {self.detection_to_stopped:.1f} s and "
                    f"restarted ({decision.reason})", acted=True)

    def _consider(self, poll) -> Any:
        """The power cycle to make now (cycling.Verdict), if any; each hold said once."""
        now, before = self.clock(), set(self.cycler.book.held)
        verdict, held = self.cycler.consider(poll, now, self.budget.cycle(now))
        for hold in held:
            log.warning("%s", hold.reason)
            self.metrics.count_held(hold.node, hold.held)
        if held or set(self.cycler.book.held) != before:
            self._save_state()
        return verdict

    def _silent(self, deployment, poll) -> Step | None:
        """The poll's lost nodes judged (silence.py: wedged, or cut off from the network or
        power), the first one's line the failure; a wedged one power-cycled as a latched GPU
        is (the same rules, book and holds), or waited for while its polls add up. None: act
        on the failure as on any lost node (stop, or restart by the policy)."""
        strip, pdu = self.rack.strip(), self.inventory.vars.pdu
        poll.silences = [judge(node, why, pdu.name if pdu else None,
                               pdu.outlet_of(node) if pdu else None,
                               strip.of(node) if strip is not None else None,
                               self.rack.kernel_answers(node))
                         for node, why in sorted(poll.lost.items())]
        poll.failure = poll.silences[0].line
        wedged = [s for s in poll.silences if s.kind == WEDGED]
        if not wedged:
            return None
        verdict = self._consider(poll)
        if verdict is not None:  # a broken group has nothing to drain: its ranks stopped at
            for where, why in self.group.stop(poll.lost, remove=False).items():  # once
                log.error("could not stop %s: %s", where, why)
            return self._power_cycle(deployment, verdict)  # the wedged rank goes with the cut
        counts, rules = self.cycler.streaks.counts, self.cycler.rules
        needed = samples_for("wedged", rules)
        waiting = [s for s in wedged if rules.allowed and f"{s.node} wedged" not in
                   self.cycler.book.held and counts.get((s.node, "wedged"), 0) < needed]
        if not waiting:
            return None
        silence = waiting[0]
        seen = counts.get((silence.node, "wedged"), 0)
        detail = (f"{silence.line}; seen in {seen} of the {needed} consecutive polls a power "
                  "cycle needs")
        if seen == 1:  # said once; the cycle (or the hold) says the rest
            log.warning("%s", detail)
        return Step("guarding", detail)

    def _power_cycle(self, deployment, verdict) -> Step:
        """Power-cycle verdict's node (its group stopped in order first), then start the
        group again in order: its gates burn every GPU, so it serves only once the cause is
        gone (watchdog/nodecycle.py)."""
        decided = self.clock()
        self.budget.record(decided)
        self._save_state()
        log.warning("%s: power-cycling it through the PDU (--allow-power-cycle), its group "
                    "stopped in order first", verdict.reason)
        cycled = self.rack.power_cycle(verdict.node, verdict.cause, deployment, self.node,
                                       self._keep)
        self._forget_group()
        return self._cycled(verdict.node, verdict.cause, decided, deployment.deployment_id,
                            cycled)

    def _finish_pending(self) -> Step:
        """Finish the cycle whose outlet was cut before this service started (its own node's
        power went with it): the node, its burn, the group started again, one audit record."""
        pending = self.cycler.book.pending
        log.warning("resuming the power cycle of %s", pending.describe())
        cycled = self.rack.finish_cycle(pending, self.node)
        return self._cycled(pending.node, pending.cause, pending.decided, pending.deployment,
                            cycled)

    def _keep(self, pending) -> None:
        """The pending restart on disk before the cut (SparkrackError if it cannot be)."""
        self.cycler.book.pending = pending
        self._save_state(strict=True)

    def _keeps(self) -> str | None:
        from sparkrack.watchdog.nodecycle import keeps_problem

        return keeps_problem(self.state_file)

    def _cycled(self, node: str, cause: str, decided: float, deployment_id: str,
                cycled) -> Step:
        """A cycle's outcome recorded (the book, the counters) and said."""
        if cycled.done:
            self.cycler.record(node, cause, decided, deployment_id, cycled.ok, cycled.line,
                               cycled.restarted)
        else:  # nothing was done (the lock was taken meanwhile): decided again later
            self.cycler.book.pending = None
            self.cycler.streaks.counts.pop((node, cause), None)
        self._save_state()
        log.warning("%s", cycled.line)
        if not cycled.ok and cycled.started is None:
            self.metrics.count_action("power_cycle_failed")
            return Step("power-cycle-failed", cycled.line, acted=True)
        self.metrics.count_action("power_cycle")
        if cycled.started is False:
            self.metrics.count_action("restart_failed")
            return Step("restart-failed", cycled.line, acted=True)
        if cycled.started:
            self.metrics.count_action("restart")
        return Step("power-cycled", cycled.line, acted=True)

    def _stop_left_behind(self) -> None:
        """Stop the ranks whose nodes answer again (their logs stay for `invoke logs`)."""
        stopped, _ = self.rack.stop_left_behind(self.left_behind)
        for rank in stopped:
            log.warning("%s answers again: rank %s (%s) stopped", rank.node, rank.rank, rank.name)
        self.left_behind = [r for r in self.left_behind if r not in stopped]
        if stopped:
            self.facts_at = None  # list the containers again: they just changed

    def _forget_group(self) -> None:
        self.group = None
        self.guarded = None
        self._guarded_deployment = None

    # --- Facts and metrics -------------------------------------------------------------

    def _refresh_facts(self, now: float) -> None:
        """Every node's facts and engine containers, every facts_every seconds."""
        if self.facts_at is None or now - self.facts_at >= self.facts_every:
            self.facts = self.rack.facts()
            self.containers = self.rack.ranks()
            self.strip = self.rack.strip()
            self.facts_at = now

    def _publish(self, current, last_good, step: Step, poll, holder: str | None,
                 seconds: float) -> None:
        """The metrics of this step (watchdog/snapshot.py), and what each rank's NCCL uses
        (watchdog/railwatch.py: read every facts_every)."""
        self.rails.poll(self.rack, current, step.verdict == "guarding", self.monotonic())
        update(self.metrics, snapshot(self, current, last_good, step.verdict, poll, holder,
                                      seconds))

    # --- Journal and state -------------------------------------------------------------

    def _say(self, step: Step) -> None:
        """Log a verdict when it changes (every action is a change), and keep it."""
        if self.last is not None and (self.last.verdict, self.last.detail) == (
                step.verdict, step.detail) and not step.acted:
            return
        if step.verdict != "guarding" or self.last is None or self.last.verdict != "guarding":
            log.info("%s: %s", step.verdict, step.detail)
        self.last = step
        self.verdicts = [*self.verdicts, {"time": self.clock(), "verdict": step.verdict,
                                          "detail": step.detail}][-VERDICTS_KEPT:]
        self._save_state()

    def _load_state(self) -> None:
        if self.state_file is None or not self.state_file.is_file():
            return
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            log.warning("%s unreadable: starting with an empty state", self.state_file)
            return
        if not isinstance(data, dict):
            return
        self.budget.load(data.get("budget", {}), self.clock())
        stopped = data.get("stopped", {})
        self.stopped = dict(stopped) if isinstance(stopped, dict) else {}
        stalls = data.get("stalls", {})
        self.stalls = {k: (str(v[0]), int(v[1])) for k, v in stalls.items()
                       if isinstance(v, list) and len(v) == 2} if isinstance(stalls, dict) else {}
        verdicts = data.get("verdicts", [])
        self.verdicts = list(verdicts)[-VERDICTS_KEPT:] if isinstance(verdicts, list) else []
        self.cycler.book = CycleBook.from_dict(data.get("power_cycles"))
        paces = data.get("paces", {})
        self.paces = {k: v for k, v in paces.items() if isinstance(v, dict)} \
            if isinstance(paces, dict) else {}

    def _save_state(self, strict: bool = False) -> None:
        """The restart budget, the groups it stopped, its last verdicts, its power cycles and
        each lane's pace baselines, for a restart of the service and for `watch.status` (written atomically and
        durably: a restart counts against the budget even across a power cut). strict: a
        SparkrackError when it cannot be written (a pending restart must be)."""
        if self.state_file is None:
            if strict:
                raise SparkrackError("no state file to keep the pending restart in")
            return
        data = {"budget": self.budget.as_dict(), "stopped": self.stopped, "stalls": self.stalls,
                "verdicts": self.verdicts, "power_cycles": self.cycler.book.as_dict(),
                "paces": self.paces, "pid": os.getpid()}
        try:
            write_atomically(self.state_file, json.dumps(data, indent=1, sort_keys=True),
                             0o644)
            self._paces_saved, self._paces_dirty = self.monotonic(), False
        except OSError as error:
            if strict:
                raise SparkrackError(f"could not write {self.state_file}: {error}",
                                     fix="nothing was power-cycled; free the disk") from error
            log.warning("could not write %s: %s", self.state_file, error)

    def run_forever(self, interval: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                    should_stop: Callable[[], bool] = lambda: False) -> None:
        """Step every interval seconds until should_stop(); an unexpected error in a step is
        logged and the next step runs (systemd restarts the service if it dies anyway)."""
        while not should_stop():
            started = self.monotonic()
            try:
                self.step()
            except Exception:  # keep guarding: one bad poll must not end the service
                log.exception("watchdog step failed")
                self._forget_group()
            sleep(max(0.0, interval - (self.monotonic() - started)))


def _lane(deployment) -> str:
    """A lane's key among the kept pace baselines: its engine and profile."""
    return f"{deployment.engine} {deployment.profile}"
