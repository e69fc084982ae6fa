"""The rehearsal rack itself: boot, SSH, privacy of node files, reboot, faults, idempotency."""

import time

import pytest
from simunits import mem_total_kb

from sparkrack.fleet import Fleet
from sparkrack.rehearsal import nodeproc

pytestmark = pytest.mark.rack


def test_all_eight_nodes_answer_over_ssh(inventory):
    with Fleet(inventory) as fleet:
        results = fleet.run(["hostname"])
    assert [r.status for r in results] == ["ok"] * 8
    assert sorted(r.stdout.strip() for r in results) == [f"spark-0{i}" for i in range(1, 9)]


def test_up_twice_leaves_one_rack(rack):
    before = {n.name: nodeproc.init_pid(n) for n in rack.nodes}
    rack.up()
    after = {n.name: nodeproc.init_pid(n) for n in rack.nodes}
    assert before == after and None not in after.values()
    nspawns = [p for n in rack.nodes for p in nodeproc.pids(n)
               if open(f"/proc/{p}/comm").read().strip() == "systemd-nspawn"]
    assert len(nspawns) == 8


def test_node_files_are_private(inventory):
    marker = "/root/sparkrack-privacy-probe"
    with Fleet(inventory, inventory.select("spark-02")) as one:
        assert one.run(["sh", "-c", 'echo "$1" > "$2"', "sh", "spark-02 only", marker])["spark-02"].status == "ok"
    try:
        with Fleet(inventory) as fleet:
            seen = fleet.run(["cat", marker])
        assert seen["spark-02"].stdout.strip() == "spark-02 only"
        others = [r for r in seen if r.node != "spark-02"]
        assert all(r.status == "failed" and r.exit_code == 1 for r in others)
    finally:
        with Fleet(inventory, inventory.select("spark-02")) as one:
            one.run(["rm", "-f", marker])


def test_each_node_has_its_own_unified_memory_and_hcas(inventory):
    with Fleet(inventory, inventory.select("spark-03,spark-04")) as fleet:
        meminfo = fleet.run(["head", "-3", "/proc/meminfo"])
        ib = fleet.run(["ibdev2netdev"])
    for r in meminfo:  # the GB10's 121.7 GiB pool, not this host's, each unit its own
        assert f"MemTotal:       {mem_total_kb(r.node)} kB" in r.stdout
    assert ib["spark-03"].stdout.splitlines() == [  # cabled on port 0, both paths
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)", "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)",
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)", "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)"]


def test_a_login_opens_no_logind_session_and_runs_no_motd(inventory):
    """A node's sshd logs in through PAM without pam_systemd and pam_motd
    (sparkrack/rehearsal/files/pam-sshd): the command runs in ssh.service, with no session
    scope, no logind session and no user manager of root's, and /run/motd.dynamic is never
    written. With them a login cost the node 51 ms of CPU, without 26 ms
    (`python benchmarks/node_login.py`), for the thousand logins of a test module."""
    probe = ("cat /proc/self/cgroup; loginctl list-sessions --no-legend | wc -l; "
             "systemctl is-active user@0.service; test -e /run/motd.dynamic; echo motd=$?")
    with Fleet(inventory, inventory.select("spark-04")) as fleet:
        for _ in range(2):  # the second login sees what the first left
            seen = fleet.run(["sh", "-c", probe])["spark-04"]
            fleet.close()
    assert seen.status == "ok", seen
    lines = seen.stdout.splitlines()
    assert "0::/system.slice/ssh.service" in lines, lines
    assert not any("session-" in line or "user.slice" in line for line in lines), lines
    assert lines[-3:] == ["0", "inactive", "motd=1"], lines


def test_reboot_brings_the_node_back(rack, inventory):
    node = rack.node("spark-06")
    with Fleet(inventory, inventory.select("spark-06")) as fleet:
        boot_before = fleet.run(["cat", "/proc/sys/kernel/random/boot_id"])["spark-06"].stdout
    boots = len(nodeproc.boot_times(node))
    rack.reboot("spark-06")
    assert len(nodeproc.boot_times(node)) == boots + 1
    with Fleet(inventory, inventory.select("spark-06")) as fleet:
        after = fleet.run(["systemctl", "is-system-running"])["spark-06"]
        boot_after = fleet.run(["cat", "/proc/sys/kernel/random/boot_id"])["spark-06"].stdout
    assert after.stdout.strip() in ("running", "degraded")
    assert boot_after != boot_before


def test_power_cut_and_power_on(rack, inventory):
    rack.poweroff("spark-07")
    assert nodeproc.pids(rack.node("spark-07")) == []
    rack.poweron("spark-07")
    with Fleet(inventory, inventory.select("spark-07")) as fleet:
        assert fleet.run(["hostname"])["spark-07"].stdout.strip() == "spark-07"


def test_cut_node_is_unreachable_fast_and_the_rest_answer(rack, inventory):
    rack.cut("spark-04")
    try:
        started = time.monotonic()
        with Fleet(inventory) as fleet:
            results = fleet.run(["hostname"])
        elapsed = time.monotonic() - started
    finally:
        rack.heal("spark-04")
    assert elapsed < 10
    assert results["spark-04"].status == "unreachable"
    assert "spark-04" in results["spark-04"].error or "10.77.1.14" in results["spark-04"].error
    assert sum(r.status == "ok" for r in results) == 7


def test_up_recovers_a_node_killed_without_cleanup(rack, inventory):
    """A killed rack leaves cgroups and a namespace behind: `up` clears them and boots."""
    import os
    import signal

    node = rack.node("spark-08")
    for pid in nodeproc.pids(node):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while nodeproc.pids(node) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node.cgroups()[0].is_dir()  # the stale cgroup tree is still there
    rack.up()
    assert nodeproc.init_pid(node) is not None
    with Fleet(inventory, inventory.select("spark-08")) as fleet:
        assert fleet.run(["systemctl", "is-active", "docker"])["spark-08"].stdout.strip() == "active"


def test_a_node_that_runs_but_never_answers_ssh_is_power_cycled_before_the_next_test(
        rack, monkeypatch):
    """The suite's guard against one hung node failing every later test: spark-08 running
    with sshd gone (as a boot or shutdown that hangs leaves it) is power-cycled, once the
    grace (30 s; 3 s here) has passed, and answers again."""
    import rackhealth

    monkeypatch.setattr(rackhealth, "HANG_GRACE_S", 3.0)
    node = rack.node("spark-08")
    boots = len(nodeproc.boot_times(node))
    nodeproc.in_node(node, ["systemctl", "stop", "ssh.service", "ssh.socket"])
    state = next(s for s in rack.status() if s.name == "spark-08")
    assert state.running and not state.ssh_open
    assert rackhealth.repair_faults(rack) == [
        "spark-08 power-cycled (running, but sshd did not answer)"]
    state = next(s for s in rack.status() if s.name == "spark-08")
    assert state.ssh_open and len(nodeproc.boot_times(node)) == boots + 1
