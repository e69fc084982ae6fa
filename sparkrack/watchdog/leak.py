"""Spot unified memory ratcheting down request after request (the field report's indexer
leak): the level MemAvailable returns to between requests makes new lows that never come
back, until the driver refuses an allocation (NV_ERR_NO_MEMORY) and the TP group dies.

The level is the highest sample of the last LEVEL_WINDOW_S seconds, so the scratch a
request takes and gives back (the bounded indexer budget) is not mistaken for a leak. A
request that holds its scratch longer than the window (a very long prefill) looks like a
step down while it runs; it takes three such steps without recovery to warn.
Pure: samples in, warnings out.
"""

from collections import deque
from dataclasses import dataclass, field

STEP_KB = 256 * 1024  # a new low must be at least this much below the previous one
RECOVERY_KB = 512 * 1024  # coming back this far above the low resets the count
LOWS_TO_WARN = 3
LEVEL_WINDOW_S = 2.0


@dataclass
class LeakWatch:
    """Per-node ratchet detector. Feed MemAvailable samples; `feed` returns a warning once."""

    floor_kb: int  # below this the driver starts refusing (the node's safety floor)
    lows: list[tuple[float, int]] = field(default_factory=list)
    recent: deque = field(default_factory=deque)  # (time, kB) of the last LEVEL_WINDOW_S
    warned: bool = False

    def feed(self, when: float, sample_kb: int) -> str | None:
        """Take one sample; a one-line warning the first time the ratchet is established."""
        self.recent.append((when, sample_kb))
        while self.recent[0][0] < when - LEVEL_WINDOW_S:
            self.recent.popleft()
        available_kb = max(kb for _, kb in self.recent)
        if self.lows and available_kb > self.lows[-1][1] + RECOVERY_KB:
            self.lows.clear()  # memory came back: a working set, not a leak
            self.warned = False
        if not self.lows or available_kb <= self.lows[-1][1] - STEP_KB:
            self.lows.append((when, available_kb))
        if len(self.lows) < LOWS_TO_WARN or self.warned:
            return None
        self.warned = True
        (t0, first), (t1, last) = self.lows[0], self.lows[-1]
        lost = first - last
        rate = lost / max(t1 - t0, 1e-6)
        eta = (last - self.floor_kb) / rate if rate > 0 else float("inf")
        return (f"MemAvailable ratcheting down: {lost / 2**20:.1f} GiB lost over "
                f"{len(self.lows)} new lows in {t1 - t0:.0f} s, now {last / 2**20:.1f} GiB; "
                f"floor {self.floor_kb / 2**20:.1f} GiB in ~{max(eta, 0):.0f} s at this rate "
                "(SGLang: is SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION set to 0.01?)")
