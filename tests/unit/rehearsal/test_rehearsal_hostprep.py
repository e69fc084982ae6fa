"""The kernel limits a rehearsal rack sizes on this machine (a file stands for procfs), and
the packages it installs: CI's install from scratch names each of them."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from sparkrack.core.errors import SparkrackError
from sparkrack.rehearsal import hostprep

FLOOR = hostprep.INOTIFY_INSTANCES_FLOOR


@pytest.mark.parametrize("have, kept", [(128, False), (FLOOR, True), (65536, True)])
def test_the_inotify_limit_is_raised_to_the_floor_said_and_never_lowered(
        tmp_path, monkeypatch, have, kept):
    limit = tmp_path / "max_user_instances"
    limit.write_text(f"{have}\n")
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES", limit)
    said = []
    hostprep.raise_kernel_limits(said.append)
    assert limit.read_text() == f"{have if kept else FLOOR}\n"
    assert said == ([] if kept else [f"fs.inotify.max_user_instances raised from {have} to "
                                     f"{FLOOR} (the rehearsal nodes share this machine's kernel)"])


def test_ci_installs_every_package_the_rack_and_the_suite_need():
    text = (Path(__file__).resolve().parents[3] / ".ci" / "run").read_text()
    lines = text.replace("\\\n", " ").splitlines()  # continuation lines joined
    listed = {word for line in lines if "apt-get install" in line for word in line.split()}
    wanted = {*hostprep.REQUIRED_COMMANDS.values(), *hostprep.SUITE_COMMANDS.values()}
    assert wanted - listed == set()


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="the installer runs as root")
def test_the_installers_lock_is_roots_alone():
    """Issue 53 item 3: the lock was /tmp/sparkrack-hostprep.lock, which any user could
    create and hold first: every rack boot needing a package then waited forever."""
    hostprep.install_packages([], say=lambda line: None)  # takes the lock, installs nothing
    lock = Path(hostprep.INSTALL_LOCK)
    folder = os.lstat(lock.parent)
    assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == 0
    assert stat.S_IMODE(folder.st_mode) == 0o700, oct(folder.st_mode)
    assert stat.S_IMODE(os.lstat(lock).st_mode) & 0o077 == 0
    tried = subprocess.run(  # an unprivileged user can neither open it nor make it
        ["/usr/bin/python3", "-c", "import fcntl, sys\n"
         "try:\n    fcntl.flock(open(sys.argv[1], 'a'), fcntl.LOCK_EX)\n"
         "except PermissionError:\n    sys.exit(3)\n", str(lock)],
        preexec_fn=lambda: (os.setgid(NOBODY), os.setuid(NOBODY)), capture_output=True,
        timeout=30)
    assert tried.returncode == 3, tried.stderr


def test_a_link_where_the_lock_belongs_is_refused(tmp_path, monkeypatch):
    lock = tmp_path / "run" / "hostprep.lock"
    lock.parent.mkdir()
    lock.symlink_to(tmp_path / "victim")
    monkeypatch.setattr(hostprep, "INSTALL_LOCK", lock)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(SparkrackError) as refused:
        hostprep.install_packages([], say=lambda line: None)
    assert refused.value.line().startswith(f"{lock}: ")
    assert not (tmp_path / "victim").exists()
