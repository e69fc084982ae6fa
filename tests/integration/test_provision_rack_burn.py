"""`invoke burn` on the rehearsal rack: every SM clock under load at or below the cap, above
it on a node whose cap was reset, latched on a latched GPU. Puts back the cap, the latch
and each node's burn record as they were."""

import re

import pytest
from provision_helpers import failures

from sparkrack.facts.node import BURN_RECORD, CLOCK_CAP_UNIT
from sparkrack.fleet import Fleet, sh
from sparkrack.provision import provision, unprovision
from sparkrack.safety.burn import LATCHED, OK, UNCAPPED, burn

pytestmark = pytest.mark.rack


@pytest.fixture(scope="module", autouse=True)
def cap_as_found(inventory):
    """The clock cap role left provisioned only if it was before this module."""
    before = provision(inventory, roles="clock_cap", check=True)
    was = before.exit_code == 0 and before.changed == 0
    yield
    if not was:
        assert unprovision(inventory, roles="clock_cap").exit_code == 0


@pytest.fixture(autouse=True)
def records_kept(inventory):
    """Each node's burn record as it was before the test (or none)."""
    with Fleet(inventory) as fleet:
        before = fleet.run(sh('cat "$1" 2>/dev/null; exit 0', BURN_RECORD))
    yield
    with Fleet(inventory) as fleet:
        had = {r.node: r.stdout.encode() for r in before if r.stdout}
        if had:
            fleet.put({node: [(text, BURN_RECORD, 0o644)] for node, text in had.items()})
        gone = [n.name for n in inventory.nodes if n.name not in had]
        if gone:
            fleet.run({name: ["rm", "-f", BURN_RECORD] for name in gone})


@pytest.fixture
def capped(inventory):
    """The clock cap provisioned and applied on every node (as it was, or now)."""
    report = provision(inventory, roles="clock_cap")
    assert report.exit_code == 0, failures(report)
    return report


def test_every_gpu_stays_at_or_below_the_cap_and_the_verdict_is_recorded(inventory, capped):
    results = burn(inventory, seconds=2)
    assert [(r.node, r.verdict) for r in results] == [(n.name, OK) for n in inventory.nodes]
    assert all(r.max_sm_mhz <= 2200 and r.max_sm_mhz >= 2000 for r in results)
    assert all(r.recorded for r in results)
    from sparkrack.status.rows import gather_status
    rows = gather_status(inventory, "spark-01,spark-02")
    assert all(row.cap_state.startswith("unit ok, verified") for row in rows)


def test_a_reset_cap_shows_above_the_cap(inventory, capped):
    with Fleet(inventory, inventory.select("spark-02")) as fleet:
        assert fleet.run(["nvidia-smi", "-rgc"])["spark-02"].ok
        try:
            results = burn(inventory, "spark-02,spark-03", seconds=2)
        finally:
            assert fleet.run(["systemctl", "restart", CLOCK_CAP_UNIT])["spark-02"].ok
    verdicts = {r.node: r for r in results}
    assert verdicts["spark-02"].verdict == UNCAPPED and not verdicts["spark-02"].ok
    assert verdicts["spark-02"].max_sm_mhz > 2200
    assert verdicts["spark-03"].verdict == OK
    assert burn(inventory, "spark-02", seconds=2, record=False)[0].ok


def test_provision_puts_a_dropped_lock_back_and_says_so(inventory, capped, capsys):
    """Issue 53: after `nvidia-smi -rgc` on spark-02 (what a driver reload or a GPU reset
    does) a burn said UNCAPPED, `invoke provision` said "0 task(s) changed" and the next
    burn was still UNCAPPED: the role judged the unit, not the lock. Now every run
    re-applies the lock, and names the node where a burn found it gone. A lock dropped with
    no burn since (spark-03) is re-applied as well, without a word: nothing said it was gone."""
    from sparkrack.cli import provision_tasks

    with Fleet(inventory, inventory.select("spark-02,spark-03")) as fleet:
        assert fleet.run(["nvidia-smi", "-rgc"]).ok
        try:
            [dropped] = burn(inventory, "spark-02", seconds=2)
            assert dropped.verdict == UNCAPPED, dropped.reason
            capsys.readouterr()
            provision_tasks.provision.body(None, inventory=str(inventory.path),
                                           role="clock_cap")
            out = capsys.readouterr().out
            after = {r.node: r for r in burn(inventory, "spark-02,spark-03", seconds=2)}
            again = provision(inventory, roles="clock_cap")
        finally:
            fleet.run(["systemctl", "restart", CLOCK_CAP_UNIT])
    assert re.search(r"spark-02:\n  ~ clock_cap +the GPU clock lock in force: run "
                     r"/usr/local/sbin/sparkrack-clock-cap lock 2200 /var/lib/sparkrack/burn"
                     r"\.json \(the lock is gone: the burn at \d\d:\d\d:\d\d found "
                     rf"{dropped.max_sm_mhz} MHz under load, over the 2200 MHz cap", out), out
    assert ("clock_cap: the GPU clock lock in force: re-applied on spark-01..spark-08 "
            "(8 nodes); put back on spark-02\n") in out
    assert "1 task(s) changed on 8 node(s)" in out
    assert [(node, r.verdict) for node, r in after.items()] == [("spark-02", OK),
                                                               ("spark-03", OK)]
    assert again.exit_code == 0 and again.changed == 0, failures(again)  # in force: no word


def test_a_latched_gpu_is_latched(rack, inventory, capped):
    rack.latch("spark-04")
    try:
        [result] = burn(inventory, "spark-04", seconds=2)
    finally:
        rack.latch("spark-04", on=False)
    assert result.verdict == LATCHED and result.max_sm_mhz < 1000
    assert "full power removal" in result.reason


def test_cli_exit_code(inventory, capsys):
    from invoke.exceptions import Exit

    from sparkrack.cli import power_tasks
    provision(inventory, roles="clock_cap")
    power_tasks.burn.body(None, inventory=str(inventory.path), limit="spark-05",
                          seconds=2)
    out = capsys.readouterr().out  # the max of a clock that wanders under the lock's bin
    assert re.search(r"spark-05\tok\t218[4-9]|spark-05\tok\t2190", out), out
    with Fleet(inventory, inventory.select("spark-05")) as fleet:
        fleet.run(["nvidia-smi", "-rgc"])
        try:
            with pytest.raises(Exit) as failed:
                power_tasks.burn.body(None, inventory=str(inventory.path), limit="spark-05",
                                      seconds=2)
        finally:
            fleet.run(["systemctl", "restart", CLOCK_CAP_UNIT])
    assert failed.value.code == 1


def test_ctrl_c_ends_the_burn_at_once_and_its_load_with_it(inventory, capped):
    """SIGINT to `invoke burn --seconds 30`: exit 130 within seconds, not when the 30 s
    burn would end, and no GPU stays loaded (the node's sampler stops its load when the
    channel closes under it)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    def loaded() -> set[str]:
        with Fleet(inventory) as fleet:
            found = fleet.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                               "--format=csv,noheader,nounits"])
        return {r.node for r in found if r.ok and r.stdout.strip() != "0"}

    proc = subprocess.Popen([sys.executable, "-m", "invoke", "burn", "--seconds", "30", "-i",
                             str(inventory.path)], cwd=Path(__file__).resolve().parents[2],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SPARKRACK_SANDBOX": "1"})
    try:
        deadline = time.monotonic() + 30
        while len(loaded()) < len(inventory.nodes):  # every GPU under the burn's load
            assert time.monotonic() < deadline and proc.poll() is None, "the burn never loaded"
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
        took = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130 and took < 5, (code, took, proc.stderr.read())
    deadline = time.monotonic() + 5
    while (still := loaded()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not still, f"GPUs still loaded after Ctrl-C: {sorted(still)}"
