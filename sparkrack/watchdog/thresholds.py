"""The thresholds that read a stalled group's GPUs, in one place, with their sources, and the
public and rehearsal figures they must hold at (docs/watchdog.md#reading-the-gpus-of-a-stall).

Progress decides a stall (progress.py); these only say which rank stands out. A GPU reads:
- idle: utilization under BUSY_UTIL. A stopped or frozen host's GPU reads 0 % from the first
  sample though it keeps its clock and a spin's draw for seconds (an H100 SIGSTOPped under
  matmuls: 0 %, 125 W against 72 W idle), so utilization, not power, says it;
- latched: busy under LATCH_MHZ (a GB10 latched in its low-clock state computes, slowly);
- spinning: busy at under SPIN_POWER_SHARE of its working power, at SPIN_CLOCK_SHARE of its
  working clock or more (a spin keeps the clock; a GPU slowed by heat draws less at a lower
  clock); before any was learned, under SPIN_UNLEARNED_W. The working power is the upper
  quartile of what the GPU drew while its group made progress (WORKING_POWER_QUANTILE):
  decode swings as low as a spin, and a rank kept waiting a moment in a collective spins
  while tokens still move; the upper quartile stays with the work. It is learned from
  WORKING_SAMPLES_MIN such readings or more (a group seen working for a few seconds only
  has too few to outvote a spin: the field's band stands until then);
- busy: otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.remote.capjudge import BUSY_PERCENT, LATCH_MHZ

BUSY_UTIL = BUSY_PERCENT  # 50 %: spinning reads 96-100 %, decode 90-99 %, stopped 0 %
# A spin against what the GPU drew while its group made progress: 16-27 W against ~45 W on a
# GB10 (0.36-0.60, against the average: its upper quartile is higher), 124 W against 468 W
# on an H100 (0.26); the rehearsal's 17.9 W against its capped decode's upper quartile of
# ~43 W (0.41; 0.53 against its median). 0.7 holds at all of them.
SPIN_POWER_SHARE = 0.7
WORKING_POWER_QUANTILE = 0.75
WORKING_SAMPLES_MIN = 6  # the upper quartile of six outvotes one spin-like reading in four
SPIN_CLOCK_SHARE = 0.9  # a spin keeps its clock: 1,980 MHz on an H100 against 1,642 working
SPIN_UNLEARNED_W = 30.0  # GB10, nothing learned yet: the field's "below ~30 W" (16-27 W spin)
__all__ = ["BUSY_UTIL", "LATCH_MHZ", "SPIN_CLOCK_SHARE", "SPIN_POWER_SHARE",
           "SPIN_UNLEARNED_W", "WORKING_POWER_QUANTILE", "WORKING_SAMPLES_MIN", "FIGURES",
           "Figure"]


@dataclass(frozen=True)
class Figure:
    """One public reading of a GPU, what it was doing, and the class it must read as."""

    state: str
    util: int
    power_w: float
    sm_mhz: int | None
    working_w: float | None  # what the GPU drew while its group made progress (None: unknown)
    working_mhz: int | None
    reads: str  # idle | spinning | busy | latched
    source: str


H100 = "an H100, driver 580.159, nvidia-smi --query-gpu every 0.2 s (issue 56)"
GB10_HANG = "vllm-project/vllm#42354; eugr/spark-vllm-docker#260"
FIGURES = (
    Figure("idle", 0, 72.0, 345, 468.0, 1642, "idle", H100),
    Figure("matmuls back to back", 99, 468.0, 1642, 468.0, 1642, "busy", H100),
    Figure("one thread block busy-waiting (a rank blocked in a collective)", 100, 124.0,
           1980, 468.0, 1642, "spinning", H100),
    Figure("a process launching matmuls, SIGSTOPped", 0, 125.0, 1980, 468.0, 1642, "idle",
           H100),
    Figure("a wedged rank spinning, lowest draw", 96, 16.0, None, 45.0, None, "spinning",
           GB10_HANG),
    Figure("a wedged rank spinning, highest draw", 96, 27.0, None, 45.0, None, "spinning",
           GB10_HANG),
    Figure("a wedged rank spinning, nothing learned yet", 96, 27.0, None, None, None,
           "spinning", GB10_HANG),
    Figure("healthy decode, its average", 95, 45.0, None, 45.0, None, "busy", GB10_HANG),
    Figure("healthy decode, a swing up", 95, 90.0, None, 45.0, None, "busy", GB10_HANG),
    Figure("a latched GB10 under load", 100, 10.8, 670, 45.0, 2190, "latched",
           "public readings of latched GB10s: 481-858 MHz at 5.8-15.8 W"),
)
