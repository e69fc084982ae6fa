"""What one step of the watchdog service shows as metrics (metrics.Snapshot): every node
from its last facts and this poll's fresher readings, the deployment and its group, the
power projection, the PDU's strip, the power cycles made and held back.
"""

from __future__ import annotations

from typing import Any

from sparkrack.safety.power import cap_state_of, project_power
from sparkrack.watchdog.cyclebook import CycleBook
from sparkrack.watchdog.metrics import (
    CycleHeld,
    CycleMark,
    DeploymentInfo,
    NodeSnapshot,
    Snapshot,
)


def snapshot(watchdog, current, last_good, verdict: str, poll, holder: str | None,
             seconds: float) -> Snapshot:
    """The snapshot of this step of watchdog (service.Watchdog): nodes (facts, plus the
    poll's fresher liveness and memory), the deployment, the group, the power projection."""
    guarding = verdict == "guarding"
    if guarding:
        states, unreachable = {r.node: r for r in poll.states}, {}
    else:  # the containers as last listed (every facts_every seconds)
        found, unreachable = watchdog.containers
        states = {r.node: r for r in found
                  if current is not None and r.deployment == current.deployment_id}
    ratcheting = watchdog.group.ratcheting() if watchdog.group is not None else set()
    nodes = []
    for node in watchdog.inventory.nodes:
        facts = watchdog.facts.get(node.name)
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
        gpu = gpu_values(watchdog, node.name, poll) if guarding else {}
        nodes.append(node_snapshot(node.name, node.rank, up, facts, memory, rank_state,
                                   node.name in ratcheting, **gpu))
    budget = project_power(watchdog.inventory, {
        name: cap_state_of(facts) for name, facts in watchdog.facts.items() if facts is not None})
    ready = bool(current and last_good and last_good.deployment_id == current.deployment_id)
    return Snapshot(
        nodes=tuple(nodes),
        deployment=None if current is None else DeploymentInfo(
            current.engine, current.profile, current.image, current.image_id,
            current.deployment_id),
        deployment_ready=ready, guarding=guarding, stepped_aside=bool(holder),
        ranks_expected=len(watchdog.inventory.nodes) if current is not None else 0,
        ranks_running=sum(1 for r in states.values() if r.alive),
        rank0_healthy=(poll.head_status == 200) if guarding else None,
        projected_watts=budget.projected_watts, strip_watts=budget.strip_watts,
        margin_watts=budget.margin_watts, poll_time=watchdog.clock(), poll_seconds=seconds,
        detection_to_stopped_seconds=watchdog.detection_to_stopped,
        no_progress_seconds=poll.no_progress_s if guarding else None,
        stalled=watchdog.stalls.get(current.deployment_id) if current is not None else None,
        blind=verdict == "blind", strip=watchdog.strip,
        power_cycles=tuple(power_cycles(watchdog.cycler.book)),
        cycles_held=tuple(held(watchdog.cycler.book)) if guarding else ())


def power_cycles(book: CycleBook) -> list[CycleMark]:
    """Each node's last power cycle, as the state file keeps it across restarts and boots."""
    return [CycleMark(node, entries[-1].cause, entries[-1].outcome, entries[-1].time)
            for node, entries in sorted(book.nodes.items()) if entries]


def held(book: CycleBook) -> list[CycleHeld]:
    """The power cycles held back now."""
    return [CycleHeld(str(h.get("node")), str(h.get("cause")), str(h.get("kind")))
            for _, h in sorted(book.held.items())]


def gpu_values(watchdog, node: str, poll) -> dict:
    """A guarded poll's own GPU reading of node and its judgement, for the metrics."""
    sample = poll.gpus.get(node)
    if sample is None:
        return {}
    thermal = getattr(watchdog.group, "thermal", {}).get(node)
    kinds = {f.kind for f in poll.findings if f.node == node}
    return {"sm_clock_mhz": sample.sm_mhz, "gpu_power_watts": sample.power_w,
            "gpu_util_pct": sample.util, "temperature_c": sample.temperature_c,
            "slowdown_c": thermal.slowdown_c if thermal else None,
            "shutdown_c": thermal.shutdown_c if thermal else None,
            "over_cap": "over-cap" in kinds, "latched": "latched" in kinds}


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
