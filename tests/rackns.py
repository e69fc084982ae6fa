"""A second rehearsal rack for the test suite's second process, in namespaces of its own.

The rack tests are the run's critical path: one rack, one process after another. Two
processes each driving a rack of their own share them out (on two cores the run is then
CPU-bound: about 14 minutes instead of 16; 11 with a third process for the unit modules). The second process runs under `unshare --mount --net` (its xdist python is
`wrapper()`), and before anything else `enter()` gives it a private view of everything the
rehearsal rack keeps on this machine: its state and node disks (/var/lib/sparkrack/
rehearsal, bound from PRIVATE_STATE), its run directory and network-namespace names
(fresh tmpfs), its cgroups (bound from PRIVATE_CGROUP), a network namespace with only
loopback in it, /sys/class/net showing that namespace, and its own copy of the
repository's inventory/rehearsal folder (where tasks record, e.g., the watchdog service
they installed). Inside, the second rack has the same names, addresses and inventory as the
machine's own, which this process never sees, and no route to anywhere but itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sparkrack.data import OWN_FOLDER
from sparkrack.rehearsal.layout import CGROUP_GROUP, CGROUP_ROOTS, RUN_DIR, STATE_DIR

ENV = "SPARKRACK_TEST_PRIVATE_RACK"  # set in the second process by its wrapper
PRIVATE_STATE = STATE_DIR.with_name(STATE_DIR.name + "-tests")
PRIVATE_CGROUP = CGROUP_GROUP + "-tests"
NETNS_DIR = Path("/run/netns")


def available() -> bool:
    """Whether this machine can give a test process a private rack (root, unshare, mounts)."""
    return (sys.platform == "linux" and os.geteuid() == 0 and shutil.which("unshare") is not None
            and any(root.is_dir() for root in CGROUP_ROOTS))


def wrapper(folder: Path) -> Path:
    """An executable that runs python (this interpreter) in a new mount and network
    namespace, marked for enter(): the `python=` of the second xdist process."""
    path = folder / "python-private-rack"
    path.write_text("#!/bin/sh\n"
                    f"export {ENV}=1\n"
                    "exec unshare --mount --net --propagation private -- "
                    f"{shlex.quote(sys.executable)} \"$@\"\n")
    path.chmod(0o755)
    return path


def inside() -> bool:
    """Whether this process was started by wrapper()."""
    return os.environ.get(ENV) == "1"


def enter(inventory: Path) -> None:
    """Give this process (already in its own namespaces) its private rack's view, and its
    own copy of the rehearsal inventory folder (what a task records there stays its own)."""
    _run("ip", "link", "set", "lo", "up")
    _own_netdevs()
    for folder in (RUN_DIR, NETNS_DIR):
        folder.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder))
    PRIVATE_STATE.mkdir(parents=True, exist_ok=True)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _run("mount", "--bind", str(PRIVATE_STATE), str(STATE_DIR))
    for root in CGROUP_ROOTS:
        if not root.is_dir():
            continue
        private, shared = root / PRIVATE_CGROUP, root / CGROUP_GROUP
        private.mkdir(exist_ok=True)
        shared.mkdir(exist_ok=True)
        _kill_leftovers(private)
        _run("mount", "--bind", str(private), str(shared))
    copy = PRIVATE_STATE / "inventory"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(inventory, copy, ignore=shutil.ignore_patterns(OWN_FOLDER))
    _run("mount", "--bind", str(copy), str(inventory))


def _own_netdevs() -> None:
    """/sys/class/net (and the devices it links to) as this network namespace has them:
    sysfs shows the namespace it was mounted in, and /sys is still this machine's (the
    network guard looks for the rack's bridge there)."""
    fresh = Path(tempfile.mkdtemp(prefix="sparkrack-sysfs-"))
    _run("mount", "-t", "sysfs", "sysfs", str(fresh))
    for part in ("class/net", "devices/virtual/net"):
        _run("mount", "--bind", str(fresh / part), f"/sys/{part}")
    _run("umount", "-l", str(fresh))
    fresh.rmdir()


def _kill_leftovers(group: Path) -> None:
    """SIGKILL what an earlier run's second rack left running (its process died without
    taking the rack down): nothing else can reach those nodes, and their cgroups are ours."""
    for procs in group.glob("**/cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"private rack: {' '.join(argv)}: {done.stderr.strip()}")
