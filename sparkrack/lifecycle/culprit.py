"""Which rank of a stalled TP group is the likely culprit, from its GPUs (pure).

In a tensor-parallel forward every rank does the same work, so every GPU reads alike: all
busy at full power while it computes, all idle between requests. A rank that hangs breaks
the pattern: one GPU busy at a fraction of its peers' power (a kernel spinning on a flag,
~96 % at ~20 W in vllm#42354's report) or idle while its peers wait in the collective, or
the reverse. Each node's GPU is read as one of

- `busy`: utilization >= 50 % at >= 60 % of the median power of the busy GPUs;
- `spinning`: utilization >= 50 % below that;
- `idle`: utilization < 50 %;

from the median of its last few samples. The culprit is the one GPU whose class no other
shares while all the others share one; with no such GPU none is named. A group whose GPUs
all read `busy` is working (a long prefill moves no token counter): not a stall.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

BUSY_UTIL = 50
SPIN_POWER_SHARE = 0.6  # of the busy GPUs' median power


@dataclass(frozen=True)
class GpuSample:
    """One nvidia-smi reading of a node's GPU (None: not reported)."""

    util: int | None
    power_w: float | None


@dataclass(frozen=True)
class Verdict:
    """The GPUs of a group, read together."""

    classes: Mapping[str, str]  # node: busy | spinning | idle | unknown
    culprit: str | None  # the node whose GPU stands out, if one does
    evidence: str  # one line: each class and its nodes' readings

    @property
    def working(self) -> bool:
        """Every GPU computes alike: the group works, whatever its counters say."""
        return bool(self.classes) and set(self.classes.values()) == {"busy"}


def _middle(samples: Sequence[GpuSample]) -> GpuSample:
    utils = [s.util for s in samples if s.util is not None]
    powers = [s.power_w for s in samples if s.power_w is not None]
    return GpuSample(round(median(utils)) if utils else None,
                     median(powers) if powers else None)


def read_gpus(samples: Mapping[str, Sequence[GpuSample]]) -> Verdict:
    """The verdict on a group's GPUs from each node's recent samples (oldest first)."""
    now = {node: _middle(s) for node, s in samples.items() if s}
    busy_powers = [s.power_w for s in now.values()
                   if s.util is not None and s.util >= BUSY_UTIL and s.power_w is not None]
    floor = SPIN_POWER_SHARE * median(busy_powers) if busy_powers else 0.0
    classes = {}
    for node, s in now.items():
        if s.util is None or s.power_w is None:
            classes[node] = "unknown"
        elif s.util < BUSY_UTIL:
            classes[node] = "idle"
        else:
            classes[node] = "busy" if s.power_w >= floor else "spinning"
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
        parts.append(f"{kind} {spread} at {watts}: {', '.join(sorted(nodes))}")
    unknown = sorted(node for node, kind in classes.items() if kind == "unknown")
    if unknown:
        parts.append(f"no reading: {', '.join(unknown)}")
    return Verdict(classes, culprit, "GPUs " + "; ".join(parts) if parts else "no GPU reading")
