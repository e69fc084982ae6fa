"""Signals around a block: turned into KeyboardInterrupt (SIGTERM, SIGHUP), or held off
until the block ends (what must not be cut short: a task's end record, the stop of a group
and the record that says it stopped)."""

import signal
import threading
from contextlib import contextmanager


@contextmanager
def interrupting():
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread for the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def held():
    """SIGINT, SIGTERM and SIGHUP held off for the block (a task's end record and the
    lock's release): the names of those that arrived, for after it."""
    caught: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def hold(signum, frame):
        caught.append(signal.Signals(signum).name)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, hold) for s in signals}
    try:
        yield caught
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
