"""The faults the stub settings give a rank (config.py): exit_at_start, die_after_s and
the wedges (wedge_at_request, wedge_above_tokens). The fabric's faults are transport.py's."""

from __future__ import annotations

import threading
import time

from .config import RankConfig
from .log import Log, die


def exit_at_start(settings: RankConfig, rank: int, log: Log) -> None:
    """End the rank at once when its settings say exit_at_start."""
    if settings.exit_at_start:
        die(settings.exit_code, f"RuntimeError: rank {rank} failed at start (sparkrack "
                                "stub fault: exit_at_start)", log)


def arm_die_after(settings: RankConfig, started: float, log: Log) -> None:
    """Arm the die_after_s fault (seconds after the process started, monotonic)."""
    seconds = settings.die_after_s
    if seconds is None:
        return
    left = max(0.0, started + seconds - time.monotonic())

    def fire():
        die(settings.exit_code,
            f"RuntimeError: CUDA error: an illegal memory access was encountered "
            f"(sparkrack stub fault: die_after_s={seconds:g})", log)
    timer = threading.Timer(left, fire)
    timer.daemon = True
    timer.start()


def wedges(settings: RankConfig, forwards: int, prompt_tokens: int) -> bool:
    """Whether a rank's forwards-th forward, of a prompt_tokens prompt, wedges it."""
    return ((settings.wedge_at_request is not None and forwards >= settings.wedge_at_request)
            or (settings.wedge_above_tokens is not None
                and prompt_tokens > settings.wedge_above_tokens))
