"""The machine's own tools a test runs (promtool, prometheus, snmpget, netplan, tmux), found or
installed, never skipped: a fresh machine's run of the README's test command installs what
is missing, as root, through the rehearsal's own installer (sparkrack.rehearsal.hostprep),
one process at a time; without root the test fails and names the package to install.
"""

from __future__ import annotations

import fcntl
import os

import pytest

from sparkrack.rehearsal import hostprep

LOCK = "/tmp/sparkrack-hostprep.lock"  # the suite's processes install one at a time
PACKAGES = {**hostprep.REQUIRED_COMMANDS, **hostprep.SUITE_COMMANDS}


def need(command: str) -> str:
    """The command's path; installed first when missing (root), else the test fails."""
    found = hostprep.find_command(command)
    if found:
        return found
    package = PACKAGES[command]
    if os.geteuid() != 0:
        pytest.fail(f"{command} is missing: apt-get install {package} (the suite installs it "
                    "itself when run as root)")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if hostprep.find_command(command) is None:  # another process may have installed it
            hostprep.install_packages([package], say=lambda line: None)
    found = hostprep.find_command(command)
    if found is None:
        pytest.fail(f"{command} is still missing after apt-get install {package}")
    return found
