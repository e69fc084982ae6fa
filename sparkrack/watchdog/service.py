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
from sparkrack.safety.power import cap_state_of, project_power
from sparkrack.watchdog.metrics import (
    DeploymentInfo,
    NodeSnapshot,
    Snapshot,
    WatchdogMetrics,
    update,
)
from sparkrack.watchdog.policy import RESTART, RestartBudget
from sparkrack.watchdog.watch import Poll, tend_gpus

log = logging.getLogger("sparkrack.watchdog")

FACTS_EVERY_S = 5.0  # between facts round trips (nvidia-smi, systemctl) for the metrics
VERDICTS_KEPT = 20  # verdict changes kept in the state file for `watch.status`


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
    def power_cycle(self, node: str) -> Any: ...  # powercycle.Cycled
    def strip(self) -> Any: ...  # the PDU's reading (pdu.strip.StripReading) or None


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
    allow_power_cycle: bool = False  # watch.install --allow-power-cycle (watchdog/latched.py)
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = RestartBudget.from_vars(self.inventory.vars)
        self.group: Group | None = None
        self.guarded: str | None = None  # deployment id of the group being guarded
        self.stopped: dict[str, str] = {}  # deployment id: why the watchdog took it down
        self.stalls: dict[str, tuple[str, int]] = {}  # deployment id: (culprit node, rank) of its stall
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
        self.cycled: set[tuple[str, str]] = set()  # (deployment id, node) a cycle was tried for
        self._load_state()

    # --- One step ----------------------------------------------------------------------

    def step(self) -> Step:
        """One poll of the rack: decide, act if needed, update the metrics."""
        started = self.monotonic()
        self._refresh_facts(started)
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
            self.guarded = deployment.deployment_id
            self._guarded_deployment = deployment
            log.info("guarding %s %s (%s): %d ranks", deployment.engine, deployment.profile,
                     deployment.deployment_id, len(mine))
        poll = self.group.poll()
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
            latched = self._to_cycle(deployment, poll)
            if latched is not None:
                return self._power_cycle(deployment, latched), poll
        if poll.failure:
            return self._act(deployment, poll.failure, poll.detected or self.monotonic(),
                             poll.lost, None, poll), poll
        return Step("guarding", f"{deployment.engine} {deployment.profile} "
                    f"({deployment.deployment_id}): {len(poll.states)} ranks running"), poll

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

    def _to_cycle(self, deployment, poll) -> str | None:
        """The latched node to power-cycle now, if allowed and within the restart budget
        (once per deployment and node: a cycle that failed is the operator's)."""
        if not self.allow_power_cycle:
            return None
        for node in sorted({f.node for f in poll.findings if f.kind == "latched"}):
            if (deployment.deployment_id, node) in self.cycled:
                continue
            self.cycled.add((deployment.deployment_id, node))
            decision = self.budget.cycle(self.clock())
            if decision.action == RESTART:
                return node
            log.warning("%s: GPU latched; %s", node, decision.reason)
        return None

    def _power_cycle(self, deployment, node: str) -> Step:
        """Power-cycle node (its group stopped in order first), then start the group again
        in order: its gates burn every GPU, so it serves only once the latch is gone."""
        self.budget.record(self.clock())
        self._save_state()
        log.warning("%s: GPU latched while its group is busy: power-cycling it through the "
                    "PDU (--allow-power-cycle), its group stopped in order first", node)
        cycled = self.rack.power_cycle(node)
        self._forget_group()
        if not cycled.ok:
            self.metrics.count_action("power_cycle_failed")
            return Step("power-cycle-failed", cycled.line, acted=True)
        self.metrics.count_action("power_cycle")
        log.warning("%s", cycled.line)
        try:
            self.rack.restart(deployment)
        except Exception as error:  # the start's own gates or start failed: nothing runs
            why = error.line() if isinstance(error, SparkrackError) else f"{error!r}"
            self.metrics.count_action("restart_failed")
            return Step("restart-failed", f"{cycled.line}; the start after it failed: {why}",
                        acted=True)
        self.metrics.count_action("restart")
        return Step("power-cycled", f"{cycled.line}; {deployment.engine} {deployment.profile} "
                    "started again in order", acted=True)

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
        """The snapshot of this step: nodes (facts, plus the poll's fresher liveness and
        memory), the deployment, the group, the power projection."""
        guarding = step.verdict == "guarding"
        if guarding:
            states, unreachable = {r.node: r for r in poll.states}, {}
        else:  # the containers as last listed (every facts_every seconds)
            found, unreachable = self.containers
            states = {r.node: r for r in found
                      if current is not None and r.deployment == current.deployment_id}
        ratcheting = self.group.ratcheting() if self.group is not None else set()
        nodes = []
        for node in self.inventory.nodes:
            facts = self.facts.get(node.name)
            up = facts is not None
            memory = None
            if poll is not None:
                up = node.name not in poll.lost and (node.name in poll.memory or up)
                memory = poll.memory.get(node.name)
            rank_state = None
            if current is not None:
                rank = states.get(node.name)
                rank_state = rank.status if rank is not None else (
                    "unreachable" if node.name in unreachable else "missing")
            gpu = self._gpu_values(node.name, poll) if guarding else {}
            nodes.append(node_snapshot(node.name, node.rank, up, facts, memory, rank_state,
                                       node.name in ratcheting, **gpu))
        budget = project_power(self.inventory, {
            name: cap_state_of(facts) for name, facts in self.facts.items() if facts is not None})
        ready = bool(current and last_good and last_good.deployment_id == current.deployment_id)
        update(self.metrics, Snapshot(
            nodes=tuple(nodes),
            deployment=None if current is None else DeploymentInfo(
                current.engine, current.profile, current.image, current.image_id,
                current.deployment_id),
            deployment_ready=ready, guarding=guarding, stepped_aside=bool(holder),
            ranks_expected=len(self.inventory.nodes) if current is not None else 0,
            ranks_running=sum(1 for r in states.values() if r.alive),
            rank0_healthy=(poll.head_status == 200) if guarding else None,
            projected_watts=budget.projected_watts, strip_watts=budget.strip_watts,
            margin_watts=budget.margin_watts, poll_time=self.clock(), poll_seconds=seconds,
            detection_to_stopped_seconds=self.detection_to_stopped,
            no_progress_seconds=poll.no_progress_s if guarding else None,
            stalled=self.stalls.get(current.deployment_id) if current is not None else None,
            blind=step.verdict == "blind", strip=self.strip))

    def _gpu_values(self, node: str, poll) -> dict:
        """A guarded poll's own GPU reading of node and its judgement, for the metrics."""
        sample = poll.gpus.get(node)
        if sample is None:
            return {}
        thermal = getattr(self.group, "thermal", {}).get(node)
        kinds = {f.kind for f in poll.findings if f.node == node}
        return {"sm_clock_mhz": sample.sm_mhz, "gpu_power_watts": sample.power_w,
                "gpu_util_pct": sample.util, "temperature_c": sample.temperature_c,
                "slowdown_c": thermal.slowdown_c if thermal else None,
                "shutdown_c": thermal.shutdown_c if thermal else None,
                "over_cap": "over-cap" in kinds, "latched": "latched" in kinds}

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

    def _save_state(self) -> None:
        """The restart budget, the groups it stopped and its last verdicts, for a restart of
        the service and for `watch.status` (written atomically and durably: a restart
        counts against the budget even across a power cut)."""
        if self.state_file is None:
            return
        data = {"budget": self.budget.as_dict(), "stopped": self.stopped, "stalls": self.stalls,
                "verdicts": self.verdicts, "pid": os.getpid()}
        try:
            write_atomically(self.state_file, json.dumps(data, indent=1, sort_keys=True),
                             0o644)
        except OSError as error:
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


def node_snapshot(name: str, rank: int, up: bool, facts, memory: tuple[int, int] | None,
                  rank_state: str | None, ratchet: bool, **gpu) -> NodeSnapshot:
    """One node's metrics from its last facts (NodeFacts or None) and this poll's fresher
    (MemTotal, MemAvailable) in kB and GPU values (gpu: NodeSnapshot's fields), if any."""
    if facts is None and memory is None:
        return NodeSnapshot(name, rank, up, rank_state=rank_state, memory_ratchet=ratchet, **gpu)
    total_kb, available_kb = memory if memory is not None else (
        facts.mem_total_kb, facts.mem_available_kb)
    values: dict[str, Any] = {
        "mem_total_bytes": None if total_kb is None else total_kb * 1024,
        "mem_available_bytes": None if available_kb is None else available_kb * 1024}
    if facts is not None:
        unit = facts.clock_cap
        verified = cap_state_of(facts).value == "capped"
        values.update(
            sm_clock_mhz=facts.gpu.sm_mhz, gpu_power_watts=facts.gpu.power_w,
            gpu_util_pct=facts.gpu.utilization_pct, temperature_c=facts.gpu.temperature_c,
            cap_unit_ok=unit.load != "not-found" and unit.active == "active"
            and unit.result == "success",
            cap_verified=verified,
            cap_verified_time=facts.burn.get("time") if verified else None)
    values.update({key: value for key, value in gpu.items() if value is not None})
    return NodeSnapshot(name, rank, up, rank_state=rank_state, memory_ratchet=ratchet, **values)
