"""A program the rack tests run on this machine beside the rack (the watchdog, a real
Prometheus): started with its output in a log file, stopped at the end whatever happened
(SIGTERM, SIGKILL after 15 s)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def running(argv: list[str], log_path: Path, **popen) -> Iterator[subprocess.Popen]:
    """argv running, its stdout and stderr in log_path, until the block ends."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **popen)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
