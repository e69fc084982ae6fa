"""A changing task's end (its audit record, the lock's release) is never cut short by a
signal. Found by the chaos run (seed 1, step 22): Ctrl-C as `roll` printed its phases,
inside the guard's end: exit 130, the lock left held and no end record."""

import os
import signal

import pytest

from sparkrack.cli import common


class _Guard:
    """A Guard whose end is where the signal lands."""

    ends: list = []

    def __init__(self, rack, task, args, on_event):
        self.lost = None
        self.record = object()

    def begin(self, wait, headless=False):
        pass

    def end(self, outcome, *, error=None, exit_code=0):
        os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode, here
        for _ in range(1000):
            pass
        _Guard.ends.append((outcome, exit_code))  # the release and the record finished


@pytest.fixture
def guarded(monkeypatch):
    import sparkrack.oplock.guard as guard_module
    from sparkrack.oplock import audit

    monkeypatch.setattr(guard_module, "Guard", _Guard)
    monkeypatch.setattr(common, "inventory_from", lambda path: object())
    monkeypatch.setattr(audit, "active", lambda record: _Null())
    said = []
    monkeypatch.setattr("sparkrack.core.console.say", said.append)
    _Guard.ends.clear()
    return said


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_ctrl_c_during_the_end_record_and_release_waits_for_them(guarded):
    assert common._guarded("roll", {"inventory": None}, None, lambda: "rolled") == "rolled"
    assert _Guard.ends == [("ok", 0)]
    assert guarded == ["SIGINT arrived as roll ended: its outcome (ok) stands, recorded and "
                       "the lock released"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
