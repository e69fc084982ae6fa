"""A node that stops answering in the middle of a long command is found within seconds
(the liveness watch of fleet_ssh), on loopback sshd (loopback.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

from loopback import Sshd, inventory, needs_sshd, new_session_pid

from sparkrack.core import events
from sparkrack.fleet import Fleet
from sparkrack.safety.burn import burn

pytestmark = needs_sshd

FOUND_WITHIN = 10.0  # issue 11: a vanished node is reported within 10 s


def _stop_later(pid: int, after: float, stopped: list) -> threading.Timer:
    def stop() -> None:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(time.monotonic())

    timer = threading.Timer(after, stop)
    timer.start()
    return timer


def test_a_node_that_stops_mid_command_is_unreachable_within_seconds(sshd: Sshd):
    rack = inventory(sshd, ("spark-01", "spark-02"), connect_timeout=5.0)
    heard: list[str] = []
    events.on_node_lost(heard.append)
    with Fleet(rack) as fleet:
        fleet.run({"spark-01": ["true"]}).raise_for_failures()
        pid = new_session_pid(sshd, lambda: fleet.run({"spark-02": ["true"]}))
        stopped: list[float] = []
        timer = _stop_later(pid, 1.0, stopped)
        try:
            started = time.monotonic()
            result = fleet.run({"spark-01": ["sleep", "9"], "spark-02": ["sleep", "60"]},
                               timeout=120)
        finally:
            timer.cancel()
            os.kill(pid, signal.SIGCONT)
    lost = result["spark-02"]
    assert result["spark-01"].ok  # quiet for 9 s, probed all along: not taken for dead
    assert lost.status == "unreachable"
    print(f"found after {started + lost.duration - stopped[0]:.1f} s")
    assert started + lost.duration - stopped[0] < FOUND_WITHIN
    assert lost.error.startswith(f"spark-02 (127.0.0.2:{sshd.port}): `sleep 60` broke off")
    assert "no answer to a liveness probe within 5 s; connection dropped" in lost.error
    assert any(m.startswith("spark-02 (127.0.0.2") and "stopped answering" in m for m in heard)


def test_a_link_cut_during_the_burn_is_reported_within_seconds(sshd: Sshd):
    rack = inventory(sshd, ("spark-01", "spark-02"), connect_timeout=5.0,
                     burn_command=("sleep", "{seconds}"))
    node = rack.node("spark-02")
    with Fleet(rack) as fleet:
        pid = new_session_pid(sshd, lambda: fleet.run({"spark-02": ["true"]}))
        stopped: list[float] = []
        timer = _stop_later(pid, 1.0, stopped)
        try:
            results = burn(rack, [node], seconds=60, record=False, fleet=fleet)
            found = time.monotonic()
        finally:
            timer.cancel()
            os.kill(pid, signal.SIGCONT)
    assert found - stopped[0] < FOUND_WITHIN
    [result] = results
    assert (result.node, result.ok, result.verdict) == ("spark-02", False, "UNREACHABLE")
    assert "spark-02" in result.reason and "liveness probe" in result.reason
