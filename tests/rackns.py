"""Private rehearsal racks for the test suite: each rack process's rack is its own.

A test process that runs rack tests (tests/integration) drives a rehearsal rack of its own,
never this machine's (the one `invoke rehearsal.up` boots) nor another run's. It runs in
mount and network namespaces of its own: an xdist rack process starts under
`unshare --mount --net` (its python is `wrapper()`); a single-process run (`-n 0`) unshares
itself once it has collected a rack test (`unshare_here()`). Once it has collected a rack
test, it takes a **slot**: one of SLOTS folders and cgroups for a test rack on this machine,
held with an exclusive lock for the life of the process (`take_slot()`; a run that finds
every slot held waits for one and says so: another run's racks are never touched). Holding
the slot, it kills what a dead run left in that slot's cgroups (nothing else), then binds the
slot's state and node disks over the rack's (/var/lib/sparkrack/rehearsal), mounts a fresh
run directory and /run/netns, binds the slot's cgroups over the rack's, shows its own
namespace's devices under /sys/class/net and works on its own copy of the repository's
inventory/rehearsal folder (`enter()`). A process that collects no rack test takes no slot,
mounts nothing and kills nothing. docs/internals.md#the-test-suite
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkrack.data import OWN_FOLDER
from sparkrack.rehearsal.layout import (
    CGROUP_GROUP,
    CGROUP_ROOTS,
    RACKS,
    STATE_DIR,
)

ENV = "SPARKRACK_TEST_PRIVATE_RACK"  # the pid of a process in namespaces of its own
SLOTS = 2  # test racks on this machine at once, whatever the number of runs
SLOTS_DIR = STATE_DIR.with_name("test-racks")  # /var/lib/sparkrack/test-racks
NETNS_DIR = Path("/run/netns")
WAIT_SAY_EVERY_S = 60.0
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000


@dataclass
class Slot:
    """One test rack's place on this machine, held while its lock file is locked."""

    index: int
    handle: object  # the open lock file; the lock lasts as long as it is open

    @property
    def state(self) -> Path:
        return SLOTS_DIR / f"slot{self.index}"

    @property
    def cgroup(self) -> str:
        """The nodes' cgroups (bound over the rack's CGROUP_GROUP)."""
        return f"{CGROUP_GROUP}-test-slot{self.index}"

    def rack_cgroup(self, number: int) -> str:
        """Rehearsal rack number's nodes' cgroups (bound over its cgroup group): rack 1's
        is cgroup, a second rack's beside it."""
        return self.cgroup if number == 1 else f"{self.cgroup}-rack{number}"

    def rack_state(self, number: int) -> Path:
        """Rehearsal rack number's state and node disks: rack 1's is state."""
        return self.state if number == 1 else self.state / f"rack{number}"

    @property
    def runner_cgroup(self) -> str:
        """The test process's own, beside the nodes' (the rack takes every folder in
        CGROUP_GROUP for a node)."""
        return f"{self.cgroup}-runner"

    @property
    def cgroups(self) -> tuple[str, ...]:
        """Every cgroup the slot's work runs in: each rack's nodes' and the runner's (what a
        run's CPU-seconds are read from)."""
        return (*(self.rack_cgroup(number) for number in RACKS), self.runner_cgroup)


def available() -> bool:
    """Whether this machine can give a test process a private rack (root, unshare, mounts)."""
    return (sys.platform == "linux" and os.geteuid() == 0 and shutil.which("unshare") is not None
            and any(root.is_dir() for root in CGROUP_ROOTS))


def wrapper(folder: Path) -> Path:
    """An executable that runs python (this interpreter) in a new mount and network
    namespace, marked for inside(): the `python=` of an xdist rack process."""
    path = folder / "python-private-rack"
    path.write_text("#!/bin/sh\n"
                    f"export {ENV}=$$\n"  # unshare execs python: the same pid
                    "exec unshare --mount --net --propagation private -- "
                    f"{shlex.quote(sys.executable)} \"$@\"\n")
    path.chmod(0o755)
    return path


def inside() -> bool:
    """Whether this process is in namespaces of its own (started by wrapper(), or after
    unshare_here()); not a process it started, which inherits the variable."""
    return os.environ.get(ENV) == str(os.getpid())


_FOR_LIFE: list[int] = []  # descriptors of this process's own slot lock, never closed
_OUTSIDE: list = []  # the namespaces this process left: open files of their ns links


def keep_outside(pid: int) -> None:
    """Hold pid's mount and network namespaces open (the machine's own, before this process
    left them), for outside()."""
    _OUTSIDE[:] = [open(f"/proc/{pid}/ns/{kind}", "rb") for kind in ("mnt", "net")]  # noqa: SIM115


def outside(argv: list[str]) -> list[str]:
    """argv run as from an operator's shell on this machine, in this directory: in the
    namespaces this process left (keep_outside), not in its private view."""
    assert _OUTSIDE, "this process is in no private namespaces of its own"
    mnt, net = (f"/proc/{os.getpid()}/fd/{handle.fileno()}" for handle in _OUTSIDE)
    return ["nsenter", f"--mount={mnt}", f"--net={net}", f"--wd={os.getcwd()}", "--", *argv]


def loopback_up() -> None:
    """A new network namespace's loopback, up (the unit tests' sshd listens on it)."""
    _run("ip", "link", "set", "lo", "up")


def unshare_here() -> None:
    """Move this (single-threaded) process into new mount and network namespaces, mounts
    kept private, as wrapper() starts an xdist rack process."""
    keep_outside(os.getpid())
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS | CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise RuntimeError(f"private rack: unshare: {os.strerror(error)}")
    _run("mount", "--make-rprivate", "/")
    os.environ[ENV] = str(os.getpid())
    loopback_up()


def take_slot(say: Callable[[str], None]) -> Slot:
    """Lock a free slot for the rest of this process's life, waiting (and saying so) while
    other runs hold every one. The lock is let go only when the process has exited (a raw
    descriptor nothing closes): the slot's next holder kills what is left in its cgroups,
    and this process must not be in them still."""
    SLOTS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    said_at = None
    while True:
        for index in range(SLOTS):
            slot = _try_slot(index)
            if slot is not None:
                if said_at is not None:
                    say(f"test rack slot {index} is free: this run's rack tests start")
                _FOR_LIFE.append(os.dup(slot.handle.fileno()))
                return slot
        now = time.monotonic()
        if said_at is None or now - said_at >= WAIT_SAY_EVERY_S:
            say("waiting for a test rack slot: every one is held by another test run ("
                + "; ".join(holders()) + "); this run's rack tests start when one is free")
            said_at = now
        time.sleep(1.0)


def try_slot() -> Slot | None:
    """A free slot locked now, or None when every slot is held."""
    SLOTS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return next((slot for index in range(SLOTS) if (slot := _try_slot(index))), None)


def release(slot: Slot) -> None:
    """Let go a slot taken with try_slot()."""
    slot.handle.close()


def holders() -> list[str]:
    """Who holds each slot, as its lock file says ('slot 0: pid 123 since 11:02:03 ...')."""
    said = []
    for index in range(SLOTS):
        try:
            text = (SLOTS_DIR / f"slot{index}.lock").read_text().strip()
        except OSError:
            text = ""
        said.append(f"slot {index}: {text or 'held'}")
    return said


def _try_slot(index: int) -> Slot | None:
    handle = open(SLOTS_DIR / f"slot{index}.lock", "a+")  # noqa: SIM115 (held open: the lock)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} since {time.strftime('%H:%M:%S')} in {os.getcwd()}\n")
    handle.flush()
    return Slot(index, handle)


def enter(slot: Slot, inventory: Path) -> None:
    """Give this process (already in its own namespaces, holding slot) its private racks'
    view (rack 1's, and a second rack's for the tests that boot one), and its own copies of
    the rehearsal inventory folders (what a task records there stays its own). What a dead
    run left in the slot's cgroups is killed first."""
    _own_netdevs()
    for folder in (*(rack.run_dir for rack in RACKS.values()), NETNS_DIR):
        folder.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder))
    slot.state.mkdir(mode=0o700, parents=True, exist_ok=True)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _run("mount", "--bind", str(slot.state), str(STATE_DIR))
    for rack in RACKS.values():  # a second rack's, within the slot's (bound above)
        if rack.number != 1:
            slot.rack_state(rack.number).mkdir(mode=0o700, exist_ok=True)
            rack.state_dir.mkdir(parents=True, exist_ok=True)
            _run("mount", "--bind", str(slot.rack_state(rack.number)), str(rack.state_dir))
    for root in CGROUP_ROOTS:
        if not root.is_dir():
            continue
        runner = root / slot.runner_cgroup
        runner.mkdir(exist_ok=True)
        kill_leftovers(runner)
        for rack in RACKS.values():
            private, shared = root / slot.rack_cgroup(rack.number), root / rack.cgroup_group
            private.mkdir(exist_ok=True)
            kill_leftovers(private)
            shared.mkdir(exist_ok=True)
            _run("mount", "--bind", str(private), str(shared))
    _join(slot)
    for number, folder in enumerate((inventory, *second_inventories(inventory)), 1):
        copy = slot.state / ("inventory" if number == 1 else f"inventory-{number}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(OWN_FOLDER))
        _run("mount", "--bind", str(copy), str(folder))


def second_inventories(inventory: Path) -> list[Path]:
    """The inventories of the racks beside rack 1's (inventory/rehearsal-2, ...) that the
    repository has."""
    return [folder for number in RACKS if number != 1
            if (folder := inventory.with_name(f"{inventory.name}-{number}")).is_dir()]


def _join(slot: Slot) -> None:
    """This process (and so what it starts: the PDU agent, the nodes' launchers before they
    move to their node's cgroup) in the slot's cgroups, where the slot's next holder finds
    what it left if it dies."""
    for root in CGROUP_ROOTS:
        if root.is_dir():
            (root / slot.runner_cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")


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


def kill_leftovers(group: Path) -> list[int]:
    """SIGKILL every process in group (a slot's cgroup tree): what a run that held the slot
    left when it died without taking its rack down. Called only by the slot's holder."""
    killed = []
    for _ in range(50):  # a launcher may start a node's nspawn while we kill: until empty
        pids = [int(pid) for procs in group.glob("**/cgroup.procs")
                for pid in procs.read_text().split() if int(pid) != os.getpid()]
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"private rack: processes left in {group} survive SIGKILL")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"private rack: {' '.join(argv)}: {done.stderr.strip()}")
