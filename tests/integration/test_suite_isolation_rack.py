"""A test run touches nothing beyond its own run: another run beside it, of unit tests or of
rack tests, leaves this run's private rack as it was (tests/rackns.py).
docs/internals.md#the-test-suite"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import rackns

from sparkrack.rehearsal.nodeproc import init_pid

REPO = Path(__file__).resolve().parents[2]
UNIT_FILE = "tests/unit/rehearsal/test_rehearsal_launcher.py"
RACK_FILE = "tests/integration/test_fleet_docker_rack.py"


def _another_run_env() -> dict:
    """The environment of a run started by hand beside this one: none of this run's
    markers (its xdist worker, its private namespaces, its state folder)."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith(("PYTEST_", "SPARKRACK_")) and key != rackns.ENV}


def _node_pids(rack) -> dict[str, int | None]:
    return {node.name: init_pid(node) for node in rack.nodes}


def _answers(rack) -> list[str]:
    """The nodes that answer over SSH (a command on every node of the rack)."""
    from sparkrack.fleet import Fleet

    with Fleet(rack.inventory) as fleet:
        result = fleet.run({node.name: ["true"] for node in rack.nodes})
    return sorted(outcome.node for outcome in result.ok)


def test_a_unit_test_run_beside_this_one_leaves_its_rack_running(rack):
    """A unit-test file run as root (three processes, two of them in namespaces of their
    own) while this run's rack is up: it boots no rack, takes no slot, kills nothing."""
    before = _node_pids(rack)
    assert all(before.values()), before
    run = subprocess.run(rackns.outside([sys.executable, "-m", "pytest", "-q", "-p",
                                         "no:cacheprovider", "-n", "3", UNIT_FILE]), cwd=REPO, env=_another_run_env(),
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "passed" in run.stdout and "slot" not in run.stderr
    assert _node_pids(rack) == before
    assert _answers(rack) == sorted(before)


def test_a_rack_run_beside_this_one_waits_for_a_slot_and_says_so(rack):
    """Every slot held (this run's and, for the test, the others): a second run that
    collected a rack test waits and says who holds them, and this run's rack is untouched."""
    before = _node_pids(rack)
    held = []
    while (slot := rackns.try_slot()) is not None:
        held.append(slot)
    try:
        run = subprocess.Popen(rackns.outside([sys.executable, "-m", "pytest", "-q", "-p",
                                               "no:cacheprovider", "-n", "0", RACK_FILE]), cwd=REPO, env=_another_run_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            said = _read_until(run, "waiting for a test rack slot", timeout=90)
            time.sleep(2)  # waiting, not booting
            assert run.poll() is None
        finally:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    finally:
        for slot in held:
            rackns.release(slot)
    assert "held by another test run" in said and f"pid {os.getpid()} " in said, said
    assert _node_pids(rack) == before
    assert _answers(rack) == sorted(before)


def _read_until(process: subprocess.Popen, text: str, timeout: float) -> str:
    """process's stderr up to the line holding text (AssertionError after timeout s)."""
    deadline = time.monotonic() + timeout
    seen = []
    os.set_blocking(process.stderr.fileno(), False)
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if line:
            seen.append(line)
            if text in line:
                return "".join(seen)
        elif process.poll() is not None:
            break
        else:
            time.sleep(0.2)
    raise AssertionError(f"no {text!r} within {timeout:.0f} s: {''.join(seen)[-1500:]}")
