"""What a stalled TP group's GPUs say, and which rank they blame (pure): each GPU read as
idle, latched, spinning or busy (the thresholds and their sources: thresholds.py), the one
whose class no other shares named. Evidence for naming, never the verdict: progress decides
a stall (docs/watchdog.md#wedged-not-dead-stalls).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from sparkrack.facts.gpu import GpuSample
from sparkrack.watchdog.thresholds import (
    BUSY_UTIL,
    LATCH_MHZ,
    SPIN_CLOCK_SHARE,
    SPIN_POWER_SHARE,
    SPIN_UNLEARNED_W,
    WORKING_POWER_QUANTILE,
    WORKING_SAMPLES_MIN,
)


@dataclass(frozen=True)
class Working:
    """What one GPU drew while its group made progress (medians of its busy samples)."""

    power_w: float
    sm_mhz: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The GPUs of a group, read together."""

    classes: Mapping[str, str]  # node: busy | spinning | latched | idle | unknown
    culprit: str | None  # the node whose GPU stands out, if one does
    evidence: str  # one line: each class and its nodes' readings

    @property
    def alike(self) -> str | None:
        """The class every GPU shares, when they all read alike (no rank stands out)."""
        known = {kind for kind in self.classes.values() if kind != "unknown"}
        return known.pop() if len(known) == 1 else None


def _middle(samples: Sequence[GpuSample]) -> GpuSample:
    def mid(values):
        values = [v for v in values if v is not None]
        return median(values) if values else None

    util, clock = mid(s.util for s in samples), mid(s.sm_mhz for s in samples)
    return GpuSample(None if util is None else round(util), mid(s.power_w for s in samples),
                     None if clock is None else round(clock))


def classify(sample: GpuSample, working: Working | None) -> str:
    """One GPU's class from its (median) sample and its working power and clock."""
    if sample.util is None or sample.power_w is None:
        return "unknown"
    if sample.util < BUSY_UTIL:
        return "idle"
    if sample.sm_mhz is not None and sample.sm_mhz < LATCH_MHZ:
        return "latched"
    if working is None:
        return "spinning" if sample.power_w < SPIN_UNLEARNED_W else "busy"
    if sample.power_w < SPIN_POWER_SHARE * working.power_w and (
            working.sm_mhz is None or sample.sm_mhz is None
            or sample.sm_mhz >= SPIN_CLOCK_SHARE * working.sm_mhz):
        return "spinning"
    return "busy"


def read_gpus(samples: Mapping[str, Sequence[GpuSample]],
              working: Mapping[str, Working] | None = None) -> Verdict:
    """The verdict on a group's GPUs from each node's recent samples (oldest first) and,
    where known, what each drew while the group made progress."""
    now = {node: _middle(s) for node, s in samples.items() if s}
    classes = {node: classify(s, (working or {}).get(node)) for node, s in now.items()}
    known = {node: kind for node, kind in classes.items() if kind != "unknown"}
    counts: dict[str, list[str]] = {}
    for node, kind in known.items():
        counts.setdefault(kind, []).append(node)
    culprit = None
    if len(counts) == 2 and len(known) >= 3:
        lone = [nodes for nodes in counts.values() if len(nodes) == 1]
        if len(lone) == 1:
            culprit = lone[0][0]
    parts = []
    for kind, nodes in sorted(counts.items(), key=lambda item: len(item[1])):
        utils = sorted(now[n].util for n in nodes)
        powers = sorted(now[n].power_w for n in nodes)
        spread = (f"{utils[0]} %" if utils[0] == utils[-1] else f"{utils[0]}-{utils[-1]} %")
        watts = (f"{powers[0]:.1f} W" if powers[0] == powers[-1]
                 else f"{powers[0]:.1f}-{powers[-1]:.1f} W")
        clocks = sorted(now[n].sm_mhz for n in nodes if now[n].sm_mhz is not None)
        if kind == "latched" and clocks:
            watts += f", {clocks[0]}-{clocks[-1]} MHz" if clocks[0] != clocks[-1] \
                else f", {clocks[0]} MHz"
        parts.append(f"{kind} {spread} at {watts}: {', '.join(sorted(nodes))}")
    unknown = sorted(node for node, kind in classes.items() if kind == "unknown")
    if unknown:
        parts.append(f"no reading: {', '.join(unknown)}")
    return Verdict(classes, culprit, "GPUs " + "; ".join(parts) if parts else "no GPU reading")


def learn(samples: Sequence[GpuSample]) -> Working | None:
    """A GPU's working power and clock from its samples taken while the group made
    progress (only those computing at a clock above the latched range, at least
    WORKING_SAMPLES_MIN of them): the power's upper quartile (WORKING_POWER_QUANTILE), the
    clock's median."""
    computing = [s for s in samples if s.util is not None and s.util >= BUSY_UTIL
                 and s.power_w is not None and (s.sm_mhz is None or s.sm_mhz >= LATCH_MHZ)]
    if len(computing) < WORKING_SAMPLES_MIN:  # too few to outvote a spin: not learned
        return None
    clocks = [s.sm_mhz for s in computing if s.sm_mhz is not None]
    powers = sorted(s.power_w for s in computing)
    return Working(powers[min(len(powers) - 1, int(WORKING_POWER_QUANTILE * len(powers)))],
                   round(median(clocks)) if clocks else None)
