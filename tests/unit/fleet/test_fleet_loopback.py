"""The fleet against a real, throwaway sshd on loopback addresses 127.0.0.x (loopback.py).

"Nodes" spark-01..03 are 127.0.0.1..3 on one sshd port, their keys in a private
known_hosts file. spark-04 (127.0.0.4) is not in it; spark-05's recorded key is wrong.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path
from threading import Thread

import paramiko
import pytest
from loopback import KNOWN, Sshd, free_port, inventory, needs_sshd, session_pids

from sparkrack.fleet import Fleet, Secret, sh
from sparkrack.fleet.ssh import UnreachableError
from sparkrack.inventory import Inventory
from sparkrack.inventory.schema import RackVars

pytestmark = needs_sshd


# --- Commands --------------------------------------------------------------------------


def test_runs_in_parallel_and_reports_each_node(sshd: Sshd):
    script = 'echo "out $1"; echo "err $1" >&2; exit "$2"'
    with Fleet(inventory(sshd)) as fleet:
        result = fleet.run({"spark-01": sh(script, "one", "0"), "spark-02": sh(script, "two", "3"),
                            "spark-03": sh(script, "three; $(reboot)", "0")})
    assert [r.node for r in result] == list(KNOWN)
    assert [r.node for r in result.ok] == ["spark-01", "spark-03"]
    assert result["spark-01"].stdout == "out one\n" and result["spark-01"].stderr == "err one\n"
    assert result["spark-03"].stdout == "out three; $(reboot)\n"
    failed = result["spark-02"]
    assert (failed.status, failed.exit_code) == ("failed", 3)
    assert failed.error == (f"spark-02 (127.0.0.2:{sshd.port}): `sh -c '{script}' sh two 3` "
                            "exited 3: err two")
    assert result.summary() == "2 ok, 1 failed (spark-02)"


def test_stdin_reaches_the_command_and_connections_stay_warm(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        first = fleet.run(["cat"], stdin=b"\x00binary\xffdata")
        connection = fleet._connections["spark-01"]
        second = fleet.run(["sh", "-c", "echo $PPID"])
        assert fleet._connections["spark-01"] is connection
    assert first["spark-01"].stdout == "\x00binary\ufffddata"
    assert second.all_ok


def test_a_command_without_stdin_reads_dev_null_and_short_ones_keep_the_connection(sshd: Sshd):
    """No EOF is sent for a command without stdin (it reads /dev/null): paramiko can send an
    EOF after the CLOSE of a command that just ended, and sshd then drops the connection
    with every command on it. Short commands end beside a long one; the long one lives."""
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        assert fleet.run(["readlink", "/proc/self/fd/0"])["spark-01"].stdout == "/dev/null\n"
        assert fleet.run(["cat"], timeout=5)["spark-01"].stdout == ""
        outcome: list = []
        long = Thread(target=lambda: outcome.append(fleet.run(
            ["sh", "-c", "for i in $(seq 40); do echo $i; sleep 0.05; done"], timeout=30)))
        long.start()
        while long.is_alive():
            assert fleet.run(["true"], timeout=10).all_ok
        long.join()
    assert outcome[0]["spark-01"].stdout.split() == [str(i) for i in range(1, 41)]


def test_secret_arguments_are_starred_in_messages(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        result = fleet.run(sh('echo "bad token $1" >&2; exit 1', Secret("hunter2")))
    error = result["spark-01"].error
    assert "hunter2" not in error
    assert error.endswith("`sh -c 'echo \"bad token $1\" >&2; exit 1' sh ***` exited 1: "
                          "bad token ***")


def test_command_timeout_fails_fast_and_keeps_a_live_connection(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        started = time.monotonic()
        result = fleet.run(["sleep", "30"], timeout=0.5)["spark-01"]
        assert time.monotonic() - started < 2
        assert (result.status, result.exit_code) == ("failed", None)
        assert result.error == f"spark-01 (127.0.0.1:{sshd.port}): `sleep 30` timed out after 0.5 s"
        assert "spark-01" in fleet._connections
        assert fleet.run(["true"]).all_ok


def test_dead_peer_on_a_warm_connection_is_unreachable_within_seconds(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01", "spark-02"), connect_timeout=1.0)) as fleet:
        assert fleet.run(["true"]).all_ok
        stopped = session_pids(sshd)
        for pid in stopped:  # the peer of every open connection stops answering
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            result = fleet.run(["true"], timeout=5)
            elapsed = time.monotonic() - started
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert elapsed < 3
        assert [r.status for r in result] == ["unreachable", "unreachable"]
        assert result["spark-01"].error == (
            f"spark-01 (127.0.0.1:{sshd.port}): no answer within 1 s on its open connection "
            "(connection dropped)")
        assert fleet._connections == {}
        assert fleet.run(["true"]).all_ok  # reconnects


def test_dead_peer_during_a_command_is_unreachable_after_the_timeout(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01",), connect_timeout=1.0)) as fleet:
        assert fleet.run(["true"]).all_ok
        stopped = session_pids(sshd)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            result = fleet.run(["true"], timeout=0.5)["spark-01"]
            elapsed = time.monotonic() - started
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
    assert elapsed < 3
    assert result.status == "unreachable"


def test_nothing_listening_is_unreachable_at_once(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01",), port=free_port())) as fleet:
        started = time.monotonic()
        result = fleet.run(["true"])["spark-01"]
    assert time.monotonic() - started < 2
    assert result.status == "unreachable"
    assert result.error.endswith(
        f"connection refused on port {fleet.nodes[0].port} (is sshd running?)")


def test_silent_listener_is_unreachable_within_the_connect_timeout(sshd: Sshd):
    with socket.socket() as silent:  # accepts TCP, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with Fleet(inventory(sshd, ("spark-01",), port=port, connect_timeout=0.5)) as fleet:
            started = time.monotonic()
            result = fleet.run(["true"])["spark-01"]
    assert time.monotonic() - started < 2
    assert result.status == "unreachable"


def test_a_node_that_never_answers_the_tcp_connect_is_named_in_seconds(sshd: Sshd):
    """A full accept queue drops SYNs as a dead or cut node does: the fast TCP probe gives up
    after TCP_CONNECT_TIMEOUT although ssh_connect_timeout is 5 s (kept for the SSH steps
    of a node that answers but is slow)."""
    from sparkrack.fleet.ssh import TCP_CONNECT_TIMEOUT

    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = []
        for _ in range(3):  # fill the accept queue (never accepted)
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
        try:
            with Fleet(inventory(sshd, ("spark-01",), port=port, connect_timeout=5.0)) as fleet:
                started = time.monotonic()
                result = fleet.run(["true"])["spark-01"]
                took = time.monotonic() - started
        finally:
            for filler in fillers:
                filler.close()
    assert result.status == "unreachable", result
    assert took < TCP_CONNECT_TIMEOUT + 1.0, took
    assert result.error.endswith(f"no answer within {TCP_CONNECT_TIMEOUT:g} s (TCP connect: "
                                 "the node is down or its link is cut)")


# --- Host keys -------------------------------------------------------------------------


def test_unknown_host_key_is_refused(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-01", "spark-04"))) as fleet:
        result = fleet.run(["true"])
    assert result["spark-01"].ok
    assert result["spark-04"].status == "unreachable"
    assert result["spark-04"].error == (
        f"spark-04 (127.0.0.4:{sshd.port}): host key not in {sshd.known_hosts}; "
        "run invoke onboard or rehearsal.up to record it")


def test_changed_host_key_is_refused(sshd: Sshd):
    with Fleet(inventory(sshd, ("spark-05",))) as fleet:
        result = fleet.run(["true"])["spark-05"]
    assert result.status == "unreachable"
    assert f"host key CHANGED since it was recorded in {sshd.known_hosts}" in result.error
    assert "refusing to connect" in result.error


def test_user_known_hosts_and_ssh_config_are_ignored(sshd: Sshd, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
    (home / ".ssh" / "config").write_text("Host *\n  Port 1\n  HostName 127.0.0.9\n")
    monkeypatch.setenv("HOME", str(home))
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    rack = inventory(sshd, ("spark-01",))
    rack_vars = RackVars(tp_size=1, ssh_connect_timeout=2.0, known_hosts_file=str(empty))
    with Fleet(Inventory(rack.path, rack.nodes, rack_vars, rack.groups)) as fleet:
        result = fleet.run(["true"])["spark-01"]
    assert "host key not in" in result.error  # reached our sshd; ~/.ssh trusted nothing


# --- Files -----------------------------------------------------------------------------


def test_put_then_get_round_trips_with_mode(sshd: Sshd, tmp_path: Path):
    local = tmp_path / "local.bin"
    local.write_bytes(b"from a path")
    target = sshd.directory / "remote"
    target.mkdir(exist_ok=True)
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        put = fleet.put({"spark-01": [(b"bytes\n", f"{target}/a.conf", 0o600),
                                      (local, f"{target}/b.bin", 0o755)]})
        got = fleet.get({"spark-01": [f"{target}/a.conf", f"{target}/b.bin"]})
        missing = fleet.get({"spark-01": [f"{target}/nope"]})
    assert put.all_ok
    assert (target / "a.conf").stat().st_mode & 0o777 == 0o600
    assert (target / "b.bin").stat().st_mode & 0o777 == 0o755
    assert not list(target.glob(".*sparkrack-tmp"))
    assert dict(got["spark-01"].files) == {f"{target}/a.conf": b"bytes\n",
                                           f"{target}/b.bin": b"from a path"}
    assert missing["spark-01"].status == "failed"
    assert missing["spark-01"].error.endswith(f"{target}/nope: No such file")


def test_put_creates_the_file_0600_and_removes_a_leftover_temporary(sshd: Sshd, tmp_path: Path,
                                                                    monkeypatch):
    target = sshd.directory / "secret"
    target.mkdir(exist_ok=True)
    leftover = target / ".sglang.env.sparkrack-tmp"  # a cut connection's, world-readable
    leftover.write_text("HF_TOKEN=old\n")
    leftover.chmod(0o644)
    opened = []
    real = paramiko.SFTPClient._request

    def spy(self, kind, *args):
        if kind == paramiko.sftp.CMD_OPEN:
            opened.append((args[0], args[1], getattr(args[2], "st_mode", None)))
        return real(self, kind, *args)

    monkeypatch.setattr(paramiko.SFTPClient, "_request", spy)
    with Fleet(inventory(sshd, ("spark-01",))) as fleet:
        put = fleet.put({"spark-01": [(b"HF_TOKEN=new\n", f"{target}/sglang.env", 0o600)]})
    assert put.all_ok
    assert opened == [(str(leftover), paramiko.sftp.SFTP_FLAG_WRITE | paramiko.sftp.SFTP_FLAG_CREATE
                       | paramiko.sftp.SFTP_FLAG_EXCL, 0o600)]
    assert not leftover.exists() and (target / "sglang.env").read_text() == "HF_TOKEN=new\n"
    assert (target / "sglang.env").stat().st_mode & 0o777 == 0o600


# --- Docker ----------------------------------------------------------------------------


def test_docker_client_refuses_an_unknown_host_key_without_shelling_out(
        sshd: Sshd, monkeypatch: pytest.MonkeyPatch):
    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError("docker-py tried to run the ssh binary")

    monkeypatch.setattr("docker.transport.sshconn.subprocess.Popen", no_subprocess)
    with Fleet(inventory(sshd, ("spark-04",))) as fleet, pytest.raises(UnreachableError) as caught:
        fleet.docker_client("spark-04")
    assert caught.value.line() == (f"spark-04 (127.0.0.4:{sshd.port}): host key not in "
                                   f"{sshd.known_hosts}; run invoke onboard or rehearsal.up "
                                   "to record it")


def test_docker_client_goes_through_the_pinned_connection(sshd: Sshd,
                                                          monkeypatch: pytest.MonkeyPatch):
    """No dockerd here: the SSH session opens, then `docker system dial-stdio` fails."""
    monkeypatch.setattr("docker.transport.sshconn.subprocess.Popen", None)
    with Fleet(inventory(sshd, ("spark-01",))) as fleet, pytest.raises(UnreachableError) as caught:
        fleet.docker_client("spark-01")
    assert caught.value.line().startswith(
        f"spark-01 (127.0.0.1:{sshd.port}): dockerd did not answer over SSH")


def test_ctrl_c_returns_at_once_and_the_remote_command_meets_a_closed_pipe(sshd: Sshd, tmp_path):
    """Interrupted while it waits (SIGINT: Ctrl-C), a run closes its channels and raises at
    once, not when the remote commands end; a command that writes then gets SIGPIPE (the
    burn check's sampler stops its load on it)."""
    marker = tmp_path / "piped"
    script = ('trap \'touch "$1"; exit 130\' PIPE; '
              'i=0; while [ $i -lt 100 ]; do echo tick; sleep 0.1; i=$((i+1)); done')
    with Fleet(inventory(sshd, ("spark-01", "spark-02"))) as fleet:
        timer = Thread(target=lambda: (time.sleep(1.0), os.kill(os.getpid(), signal.SIGINT)))
        timer.start()
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            fleet.run(sh(script, str(marker)), timeout=60)
        returned = time.monotonic() - began
        timer.join()
    assert returned < 3.0, f"the run returned {returned:.1f} s after it began (remote: 10 s)"
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "the remote command never met the closed pipe"
