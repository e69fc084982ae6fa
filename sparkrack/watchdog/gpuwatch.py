"""What each poll's GPU reading says about a serving node, beyond the group's progress
(pure): the clock lock lost, the GPU latched, the GPU hot.

- **over-cap**: busy (utilization >= 50 %) at an SM clock above the inventory's cap. The
  driver keeps a lock until `nvidia-smi -rgc`, a reboot, a driver reload or a GPU reset;
  operators have lost it to an out-of-memory event too. The cap unit still reads active,
  so only the clock shows it: the watchdog restarts the unit (capguard.py).
- **latched**: busy at a clock in the GB10's low-clock range (< 1,000 MHz; 481-858 MHz at
  5.8-15.8 W in public readings) that no heat explains. The rank computes, slowly, and
  the group with it; only a full power removal clears it. `Finding.evidence` carries what
  a power-cycle needs (watchdog/cycling.py decides it).
- **hot** / **overheating**: the temperature within THERMAL_MARGIN_C of the GPU's own
  slowdown temperature, or at or past it (or within SHUTDOWN_MARGIN_C of its shutdown),
  judged only where nvidia-smi gives the thresholds. A busy low clock that a thermal
  slowdown explains (thermal_excuse) is overheating, never latched: the GPU slows itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkrack.facts.gpu import GpuSample, Thermal
from sparkrack.remote.capjudge import BUSY_PERCENT, LATCH_MHZ

THERMAL_MARGIN_C = 5  # hot: this close to the slowdown temperature
SHUTDOWN_MARGIN_C = 3  # overheating: this close to the shutdown temperature
KINDS = ("over-cap", "latched", "hot", "overheating", "slow")  # slow: the group's (pace.py)


@dataclass(frozen=True)
class Finding:
    """One condition of one node's GPU this poll: what it is, the readings, the fix."""

    node: str
    rank: int
    kind: str  # one of KINDS
    line: str  # one line for the operator: the reading and what to do
    evidence: Mapping[str, float | int | None] = field(default_factory=dict)


def judge(node: str, rank: int, gpu: GpuSample, cap_mhz: int,
          thermal: Thermal | None = None) -> list[Finding]:
    """The conditions one GPU reading shows (none: all is well, or nothing to judge)."""
    found = []
    evidence = {"sm_mhz": gpu.sm_mhz, "power_w": gpu.power_w, "util": gpu.util,
                "temperature_c": gpu.temperature_c, "event_reasons": gpu.event_reasons}
    busy = gpu.util is not None and gpu.util >= BUSY_PERCENT
    low = busy and gpu.sm_mhz is not None and gpu.sm_mhz < LATCH_MHZ
    excuse = thermal_excuse(gpu, thermal or Thermal()) if low else None
    if busy and gpu.sm_mhz is not None and gpu.sm_mhz > cap_mhz:
        found.append(Finding(node, rank, "over-cap", (
            f"{node}: GPU at {gpu.sm_mhz} MHz under load ({gpu.util} %), above the "
            f"{cap_mhz} MHz cap: its clock lock was lost (nvidia-smi -rgc, a driver reload, "
            "a GPU reset, an out-of-memory event); re-applying it"),
            {**evidence, "cap_mhz": cap_mhz}))
    if low and excuse is None:
        watts = "" if gpu.power_w is None else f" at {gpu.power_w:.1f} W"
        found.append(Finding(node, rank, "latched", (
            f"{node}: GPU latched in its low-clock state: {gpu.sm_mhz} MHz{watts} while rank "
            f"{rank} is busy ({gpu.util} %); only a full power removal clears it: power "
            f"{node} off at the wall (a reboot does not), then invoke burn --limit {node}"),
            evidence))
    heat = _thermal(node, rank, gpu, thermal or Thermal(), evidence)
    if excuse is not None:  # the GPU slows itself: overheating, whatever the thresholds say
        heat = [Finding(node, rank, "overheating", (
            f"{node}: GPU held at {gpu.sm_mhz} MHz under load ({gpu.util} %) by {excuse}: "
            "its heat, not a latch (a power cycle would not help); check its airflow (vents, "
            "dust, the room) and what it runs"), {**evidence, "excuse": excuse})]
    return found + heat


def thermal_excuse(gpu: GpuSample, thermal: Thermal) -> str | None:
    """What says the GPU slows itself for heat (None: nothing does): the driver's thermal
    slowdown reasons, the temperature at its T.Limit (margin 0 or less: where the GPU
    starts slowing itself), or at or past its own slowdown temperature."""
    reasons = gpu.thermal_slowdown
    degrees = "" if gpu.temperature_c is None else f" at {gpu.temperature_c} C"
    if reasons:
        return f"its {reasons}{degrees}"
    if gpu.margin_c is not None and gpu.margin_c <= 0:
        return f"its temperature at its T.Limit{degrees} (margin {gpu.margin_c} C)"
    if (thermal.slowdown_c is not None and gpu.temperature_c is not None
            and gpu.temperature_c >= thermal.slowdown_c):
        return f"its temperature past its slowdown temperature ({thermal.slowdown_c:g} C){degrees}"
    return None


def _thermal(node: str, rank: int, gpu: GpuSample, thermal: Thermal,
             evidence: dict) -> list[Finding]:
    temperature = gpu.temperature_c
    slowdown, shutdown = thermal.slowdown_c, thermal.shutdown_c
    if temperature is None or not thermal.known:
        return []
    limits = "; ".join(part for part in (
        None if slowdown is None else f"slowdown {slowdown:g} C",
        None if shutdown is None else f"shutdown {shutdown:g} C") if part)
    evidence = {**evidence, "slowdown_c": slowdown, "shutdown_c": shutdown}
    fix = "check its airflow (vents, dust, the room) and what it runs"
    if (slowdown is not None and temperature >= slowdown) or (
            shutdown is not None and temperature >= shutdown - SHUTDOWN_MARGIN_C):
        return [Finding(node, rank, "overheating", (
            f"{node}: GPU at {temperature} C, at or past its own limits ({limits}): the "
            f"hardware slows it down and it shuts down at its shutdown temperature; {fix}"),
            evidence)]
    if slowdown is not None and temperature >= slowdown - THERMAL_MARGIN_C:
        return [Finding(node, rank, "hot", (
            f"{node}: GPU at {temperature} C, {slowdown - temperature:g} C below its slowdown "
            f"temperature ({limits}): it slows itself down to stay under it; {fix}"),
            evidence)]
    return []
