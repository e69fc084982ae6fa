"""`up`, `down` and `roll`: the engine lifecycle as the operator runs it.

up:   gates -> burn (leftovers removed, compile cache folders made, docker limits probed
      meanwhile) -> record
      "current" -> create, start in order -> readiness -> smoke request -> "last-good" with
      the phase times (a start that fails: record "failed", "current" removed)
down: drain rank 0 (drain.py: SIGTERM, its in-flight requests finish within the inventory's
      drain budget), stop it, then the workers; remove; wait for unified memory
roll: build and gate the new deployment while the old one serves (nodes whose cap a burn
      verified this boot are not burned again); stop the old; start the new; smoke-test it;
      on failure bring the last known-good deployment back and say so.

Each resolves the engine it is given once into a lane (engines/lane.py: its profile file
read once) and passes that down; a restore resolves the last good deployment's.
What each changes goes to the running task's audit record (oplock.audit.note).
"""

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from sparkrack.core import signals
from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.headapi import Endpoint
from sparkrack.deployments.record import Deployment
from sparkrack.deployments.running import running
from sparkrack.engines import EngineLane, LaunchSpec, engine_lane, resolve_lane
from sparkrack.facts.node import facts_argv, parse_facts
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.lifecycle.gates import Preflight, memory_problems, preflight
from sparkrack.lifecycle.nodelimits import Limits
from sparkrack.lifecycle.phases import Phases
from sparkrack.lifecycle.start import Progress, StartFailed, prepare, start_group
from sparkrack.lifecycle.stop import (
    RECOVERY_TIMEOUT,
    StopReport,
    stop_engine,
    stop_group,
    wait_memory,
)
from sparkrack.oplock.audit import note
from sparkrack.oplock.breakfold import fold_records
from sparkrack.oplock.identity import operator

SMOKE_PROMPT = "Reply with one word: ready?"


class Refused(SparkrackError):
    """A gate refused the start; nothing on the rack was changed."""

    outcome = "refused"  # the audit record's word


def new_deployment_id(engine: str, profile: str) -> str:
    """A fresh deployment id: engine, profile, time and a random suffix."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{engine}-{profile}-{stamp}-{uuid.uuid4().hex[:4]}"


def gated(fleet: Fleet, inventory: Inventory, lane: EngineLane, *,
          what: str, on_event: Callable[[str], None], **options) -> Preflight:
    """Every gate for a new deployment of the lane, said; Refused on a blocking one.
    The preflight's specs are what the deployment will run."""
    pre = preflight(fleet, inventory, lane,
                    deployment_id=new_deployment_id(lane.engine, lane.profile.name), **options)
    refuse_on(pre, what, on_event)
    return pre


def refuse_on(pre: Preflight, what: str, on_event: Callable[[str], None]) -> None:
    """Say every gate's verdict, then raise Refused listing the blocking ones (one per line)."""
    for gate in pre.gates:
        verdict = "ok" if gate.ok else "FAIL" if gate.blocking else "warn"
        on_event(f"gate {gate.name}: {verdict} - {gate.detail}")
    if pre.blocking:
        lines = [f"{g.name}: {g.detail}" for g in pre.blocking]
        raise Refused(f"{what} refused:\n  " + "\n  ".join(lines))


def smoke_test(inventory: Inventory, specs: tuple[LaunchSpec, ...]) -> str:
    """One real chat completion through rank 0's OpenAI-compatible endpoint; returns its text."""
    head = specs[0]
    model = inventory.vars.model_name
    try:
        body = Endpoint(inventory.node(head.node), head.ports["http"], model).chat(
            [{"role": "user", "content": SMOKE_PROMPT}], max_tokens=8, timeout=60)
        text = body["choices"][0]["message"]["content"]
    except Exception as exc:
        raise StartFailed(f"smoke request to rank 0 failed: {str(exc).splitlines()[0][:200]}") from None
    if not text:
        raise StartFailed("smoke request to rank 0 returned no text")
    return text


def deployment_of(specs: tuple[LaunchSpec, ...], pre: Preflight) -> Deployment:
    """The record of a deployment about to start."""
    head = specs[0]
    return Deployment(engine=head.engine, profile=head.profile, deployment_id=head.deployment_id,
                      spec_hash=head.spec_hash, image=head.image, image_id=pre.image_id,
                      mem_available_kb_before={n: f.mem_available_kb for n, f in pre.facts.items()},
                      waivers=pre.waivers, overrides=pre.overrides, operator=operator(),
                      model_path=pre.model_path, weights_digest=pre.weights_digest)


def launch(fleet: Fleet, inventory: Inventory, lane: EngineLane, pre: Preflight, *, timeout,
           on_progress, on_event, phases: Phases | None = None, limits: Limits | None = None,
           allow_degraded: bool = False) -> Deployment:
    """Start a gated deployment of the lane, pre.specs (prepared already if limits are
    given: start.prepare), smoke-test it, record it as current and last-good, with its
    phase times. A start that fails (or is interrupted) is recorded as "failed" and
    "current" removed."""
    phases = phases or Phases()
    specs = pre.specs
    deployment = deployment_of(specs, pre)
    note(deployment=deployment.deployment_id, nodes=[s.node for s in specs],
         containers=[f"{s.container_name}@{s.node}" for s in specs],
         waivers=pre.waivers, overrides=pre.overrides)
    record.write(fleet, inventory, "current", deployment)
    try:
        seconds = start_group(fleet, inventory, specs, serving=lane.serving, timeout=timeout,
                              on_progress=on_progress, on_event=on_event, limits=limits,
                              phases=phases, allow_degraded=allow_degraded)
        on_event(f"rank 0 healthy after {seconds:.1f} s")
        try:
            with phases.timed("smoke"):
                reply = smoke_test(inventory, specs)
        except BaseException:  # failed or interrupted (start_group stops its own on failure)
            with signals.held():  # nothing of the group is left running
                stop_engine(fleet, timeout=10, recovery_timeout=0)
            raise
    except BaseException as failure:
        why = failure.line() if isinstance(failure, SparkrackError) else (
            "interrupted" if isinstance(failure, KeyboardInterrupt) else f"{type(failure).__name__}: {failure}")
        with signals.held():  # the record of a failed start is never cut short
            mark_failed(fleet, inventory, deployment, why, on_event,
                        getattr(failure, "log_tail", None))
        raise
    on_event(f"smoke request answered: {reply.strip()[:40]!r}")
    deployment.status = "serving"
    deployment.phases = phases.as_dict()
    record.write(fleet, inventory, "last-good", deployment)
    record.write(fleet, inventory, "current", deployment)
    return deployment


def mark_failed(fleet: Fleet, inventory: Inventory, deployment: Deployment, why: str,
                on_event: Callable[[str], None], log_tail: dict | None = None) -> None:
    """Record a failed start as "failed" (with the failed rank's last log lines, if known)
    and remove "current" (nothing of it runs)."""
    try:
        record.write(fleet, inventory, "failed", replace(deployment, status="failed", error=why,
                                                        log_tail=log_tail or {}))
        record.clear(fleet, inventory, "current")
    except SparkrackError as error:
        on_event(f"could not mark deployment {deployment.deployment_id} failed: {error.line()}")


def up(inventory: Inventory, engine: str | EngineLane, profile: str | None = None, *,
       timeout=None, override_power: str | None = None,
       on_progress: Callable[[Progress], None] = lambda p: None,
       on_event: Callable[[str], None] = lambda e: None, fabric_check: bool = False,
       allow_degraded: bool = False) -> Deployment:
    """Gate, start, wait, smoke-test engine's profile (a lane resolved already, or an engine
    and profile name: resolved here, engines/lane.py). Refused or StartFailed on failure
    (nothing left running).
    allow_degraded: a node's rails down or unknown to NCCL, or a rank whose NCCL runs on
    fewer rails or TCP, is said and started anyway (ncclcheck).

    While the burn gate runs, an earlier failed start's leftovers are removed and the
    nodes' docker limits probed (start.prepare): nothing is created before every gate
    passed, so a refusal leaves nothing behind, even on a node lost meanwhile."""
    lane = engine_lane(inventory, engine, profile)
    phases = Phases()
    prepared: list[Limits] = []
    failed: list[StartFailed] = []
    with Fleet(inventory) as fleet:
        def get_ready(pre: Preflight) -> None:
            try:
                with phases.timed("prepare"):
                    prepared.append(prepare(fleet, inventory, pre.specs, on_event=on_event))
            except StartFailed as error:  # said once the gates are known: a refusal wins
                failed.append(error)

        pre = gated(fleet, inventory, lane, what=lane.label,
                    on_event=on_event, override_power=override_power, phases=phases,
                    fabric_check=fabric_check, meanwhile=get_ready,
                    allow_degraded=allow_degraded)
        if failed:
            mark_failed(fleet, inventory, deployment_of(pre.specs, pre), failed[0].line(),
                        on_event)
            raise failed[0]
        return launch(fleet, inventory, lane, pre, timeout=timeout,
                      on_progress=on_progress, on_event=on_event, phases=phases,
                      limits=prepared[0] if prepared else None, allow_degraded=allow_degraded)


def down(inventory: Inventory, *, timeout: int | None = None,
         on_event: Callable[[str], None] = lambda e: None) -> StopReport:
    """Stop the running engine in order, clear its record, wait for memory to come back (to
    the figures the current record kept from before its start)."""
    started = time.monotonic()
    with Fleet(inventory) as fleet:
        report, late = stop_deployment(fleet, inventory, timeout=timeout, on_event=on_event)
        current = report.current
        note(containers=[f"{r.name}@{r.node}" for r in report.stopped],
             nodes=[r.node for r in report.stopped],
             **({"stopped": current.deployment_id} if current and report.stopped else {}),
             **({"drain": report.drain.record()} if report.drain else {}))
        if late:
            raise KeyboardInterrupt(late[0])
        wait_for_memory(fleet, report)
        moved, problems = fold_records(fleet, inventory.head.name)
        if moved:
            note(break_glass_records=moved)
            on_event(f"{moved} break-glass record(s) moved into {inventory.head.name}'s "
                     "audit log")
        for problem in problems:
            on_event(problem)
        report.seconds = time.monotonic() - started
        return report


def stop_deployment(fleet: Fleet, inventory: Inventory, *, timeout: int | None,
                    on_event: Callable[[str], None],
                    records: dict[str, Deployment | None] | None = None
                    ) -> tuple[StopReport, list[str]]:
    """Stop the group and clear the head's current record as one act: Ctrl-C (or SIGTERM,
    SIGHUP) waits for both, so that an interrupted `down` or `roll` never leaves a record
    of a group that is gone or half stopped. The report (report.current: the record as it
    was; from records when the caller read them already) and the signals that arrived
    meanwhile, for the caller to act on."""
    with signals.held() as late:
        report = stop_group(fleet, timeout=timeout, on_event=on_event)
        try:
            report.current = (records or record.read(fleet, inventory))["current"]
        except SparkrackError as error:  # the head lost meanwhile: named, the stop stands
            report.errors[inventory.head.name] = error.line()
        if not report.errors:
            record.clear(fleet, inventory, "current")
    if late:
        on_event(f"{late[0]} arrived while the group stopped: it stopped whole and its "
                 "record was cleared first; the memory wait is skipped")
    return report, late


def wait_for_memory(fleet: Fleet, report: StopReport) -> None:
    """After stop_deployment: wait for the memory its ranks held (back to the figures the
    current record kept from before its start), into report.not_recovered."""
    if report.stopped:
        current = report.current
        report.not_recovered = wait_memory(
            fleet, current.mem_available_kb_before if current else {}, RECOVERY_TIMEOUT)


def roll(inventory: Inventory, engine: str | EngineLane, profile: str | None = None, *,
         timeout=None, override_power: str | None = None,
         on_progress: Callable[[Progress], None] = lambda p: None,
         on_event: Callable[[str], None] = lambda e: None, fabric_check: bool = False,
         allow_degraded: bool = False) -> Deployment:
    """Switch lanes (engine, profile: as up's); on failure restore the last known-good
    deployment and raise RollFailed. allow_degraded: as up's."""
    lane = engine_lane(inventory, engine, profile)
    phases = Phases()
    with Fleet(inventory) as fleet:
        replacing = running(fleet).deployment
        pre = preflight(fleet, inventory, lane,
                        deployment_id=new_deployment_id(lane.engine, lane.profile.name),
                        replacing=replacing, override_power=override_power,
                        keep_verified=True,
                        phases=phases, fabric_check=fabric_check,
                        allow_degraded=allow_degraded)
        refuse_on(pre, f"roll to {lane.label}", on_event)
        with phases.timed("stop_old"):
            began = time.monotonic()
            stopped, late = stop_deployment(fleet, inventory, timeout=None, on_event=on_event,
                                            records=pre.records)
            current = stopped.current
            note(stopped=replacing or (current.deployment_id if current else None),
                 **({"drain": stopped.drain.record()} if stopped.drain else {}))
            if late:
                raise KeyboardInterrupt(late[0])
            wait_for_memory(fleet, stopped)
            stopped.seconds = time.monotonic() - began
        on_event(f"old deployment stopped in {stopped.seconds:.1f} s")
        try:
            refresh_memory(fleet, lane, pre)
            return launch(fleet, inventory, lane, pre, timeout=timeout, on_progress=on_progress,
                          on_event=on_event, phases=phases, allow_degraded=allow_degraded)
        except (StartFailed, Refused) as failure:
            last = pre.records.get("last-good")
            if last is None:
                raise RollFailed(f"roll to {lane.label} failed: {failure.line()}; "
                                 "no last known-good deployment to bring back") from None
            on_event(f"roll failed; bringing back the last known-good: {last.describe()}")
            back = restore(fleet, inventory, last, timeout, on_progress, on_event)
            raise RollFailed(f"roll to {lane.label} failed: {failure.line()}\n"
                             f"rolled back to the last known-good deployment: {back.describe()}") from None


class RollFailed(SparkrackError):
    """The new deployment failed; the message says what runs now."""


def refresh_memory(fleet: Fleet, lane: EngineLane, pre: Preflight) -> None:
    """Re-read facts once the old engine stopped; Refused if memory did not come back for
    the lane's specs (pre.specs)."""
    pre.facts = {r.node: parse_facts(r.stdout) for r in fleet.run(facts_argv(), timeout=20)
                 if r.status == "ok"}
    problems = memory_problems(pre.specs, pre.facts, lane.serving.memory_fraction)
    if problems:
        raise Refused("memory after stopping the old deployment: " + "; ".join(problems))


def restore(fleet: Fleet, inventory: Inventory, last: Deployment, timeout, on_progress,
            on_event) -> Deployment:
    """Start the last known-good deployment again: its image (a roll that upgraded the
    engine falls back to the version that served), rebuilt from the inventory and the
    nodes' env files. Nodes whose cap a burn verified this boot are not burned again: the
    rack is not serving while this runs. The record names the lane: it is resolved once,
    here, with the record's image."""
    phases = Phases()
    lane = resolve_lane(inventory, last.engine, last.profile, image=last.image)
    pre = gated(fleet, inventory, lane, keep_verified=True,
                what=f"restoring {lane.label}", on_event=on_event, phases=phases)
    if pre.specs[0].spec_hash != last.spec_hash:
        on_event(f"note: {last.engine} {last.profile} spec changed since it was last good "
                 f"({last.spec_hash[:12]} -> {pre.specs[0].spec_hash[:12]})")
    if last.image_id and pre.image_id != last.image_id:
        on_event(f"note: {last.image} is {pre.image_id[:19]} now, {last.image_id[:19]} when it "
                 "was last good")
    return launch(fleet, inventory, lane, pre, timeout=timeout, on_progress=on_progress,
                  on_event=on_event, phases=phases)
