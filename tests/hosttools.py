"""The machine's own tools a test runs (promtool, prometheus, snmpget, netplan, tmux), found or
installed, never skipped: a fresh machine's run of the README's test command installs what
is missing, as root, through the rehearsal's own installer (sparkrack.rehearsal.hostprep),
one process at a time; without root the test fails and names the package to install.
"""

from __future__ import annotations

import os

import pytest

from sparkrack.rehearsal import hostprep

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
    hostprep.install_packages([package], say=lambda line: None)  # one process at a time
    found = hostprep.find_command(command)
    if found is None:
        pytest.fail(f"{command} is still missing after apt-get install {package}")
    return found
