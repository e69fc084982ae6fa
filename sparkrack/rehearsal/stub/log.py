"""A rank's log lines, in its engine's format, and the one way a rank ends: die(), from
any thread."""

from __future__ import annotations

import os
import sys
import threading
import time


class Log:
    """Engine-flavoured log lines on stdout (errors on stderr), flushed at once."""

    def __init__(self, engine: str, rank: int):
        self.engine = engine
        self.rank = rank

    def __call__(self, message: str, level: str = "INFO") -> None:
        now = time.time()
        if self.engine == "sglang":
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            line = f"[{stamp} TP{self.rank}] {message}"
        else:
            stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(now))
            line = f"{level} {stamp} [rank{self.rank}] {message}"
        stream = sys.stderr if level == "ERROR" else sys.stdout
        print(line, file=stream, flush=True)


_dying = threading.Lock()


def die(code: int, message: str | None = None, log: Log | None = None) -> None:
    """Print message (stderr) and end the process now with code, from any thread."""
    if not _dying.acquire(blocking=False):
        time.sleep(3600)  # another thread is already ending the process
    if message:
        if log is not None:
            for line in message.splitlines():
                log(line, "ERROR")
        else:
            print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
