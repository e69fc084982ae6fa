"""What this machine needs before it can host a rehearsal rack: packages, a client key and
kernel limits sized for many nodes on one kernel. The test suite's own tools (promtool,
tmux) come from the same installer, so a fresh machine's run skips nothing
(docs/rehearsal.md#what-the-host-needs)."""

import fcntl
import os
import shutil
import stat
import subprocess
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.rehearsal.layout import CLIENT_KEY, SSH_DIR

# command -> Debian package that provides it
REQUIRED_COMMANDS = {
    "systemd-nspawn": "systemd-container",
    "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
    "dockerd": "docker.io",
    "busybox": "busybox-static",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "netplan": "netplan.io",  # the nodes apply their fabric config with it, as DGX OS does
    "udevadm": "udev",  # which `netplan apply` calls
    "snmpget": "snmp",  # net-snmp's tools, to talk to the rack's PDU as an operator would
    "nmcli": "network-manager",  # a node that renders its netplan with NetworkManager
}
# what the test suite runs beside the rack: promtool checks the shipped alert rules, a real
# Prometheus scrapes the watchdog, tmux shows the screens as an operator's terminal does
SUITE_COMMANDS = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "tmux": "tmux",
}
# A package whose daemon this machine must never run: its start is refused at install
# (policy-rc.d) and its enablement links removed. The nodes see this /etc under their own,
# and a node that runs it enables it on its own disk.
HOST_NEVER_RUNS = {
    "network-manager": ("NetworkManager.service", "dbus-org.freedesktop.nm-dispatcher.service",
                        "NetworkManager-wait-online.service"),
}
POLICY_RC = Path("/usr/sbin/policy-rc.d")
# one installer at a time, machine-wide: in a folder of root's alone, where no other user
# can take the lock first (in /tmp anyone could, and make every rack boot wait)
INSTALL_LOCK = Path("/run/sparkrack/hostprep.lock")
SBIN_DIRS = ("/usr/sbin", "/sbin")
# Every node's systemd, journald, networkd and dockerd hold inotify instances, counted per
# user across the whole kernel: a real Spark has a kernel of its own, the rehearsal nodes
# share this machine's, whose default (128) runs out at about two racks' worth of nodes
# (a node then fails to boot: "Failed to create inotify object: Too many open files").
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_INSTANCES_FLOOR = 8192


def find_command(command: str) -> str | None:
    """The command's path on this machine (sbin included), or None."""
    return shutil.which(command, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS]))


def missing_packages(commands: dict[str, str] = REQUIRED_COMMANDS) -> list[str]:
    """Debian packages whose commands are not on this machine."""
    return sorted({pkg for cmd, pkg in commands.items() if find_command(cmd) is None})


def install_packages(packages: list[str], say) -> None:
    """apt-get install the packages (saying so), failing with the apt error in one line.
    A package in HOST_NEVER_RUNS is installed with its daemon kept off this machine. One
    process installs at a time (two racks of one test run boot side by side); a package
    another installed meanwhile is skipped."""
    if os.geteuid() != 0:
        raise SparkrackError("the rehearsal rack needs root (namespaces, nspawn, mounts)",
                             fix="run invoke as root")
    lock = _install_lock()
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = {pkg for cmd, pkg in {**REQUIRED_COMMANDS, **SUITE_COMMANDS}.items()
                  if find_command(cmd) is None}
        packages = [pkg for pkg in packages if pkg in wanted]
        if packages:
            _install(packages, say)
    finally:
        os.close(lock)


def _install_lock() -> int:
    """The installer's lock file, open: its folder made root's alone (0700) and the file
    opened without following a link (SparkrackError when the folder is someone else's,
    or the lock is a link)."""
    folder = INSTALL_LOCK.parent
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
            raise SparkrackError(f"{folder}: not a folder of root's, where the installer's "
                                 "lock belongs", fix=f"remove {folder}, then retry")
        os.chmod(folder, 0o700)
        return os.open(INSTALL_LOCK,
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise SparkrackError(f"{INSTALL_LOCK}: {error.strerror}",
                             fix=f"remove {INSTALL_LOCK}, then retry") from None


def _install(packages: list[str], say) -> None:
    say(f"installing {', '.join(packages)} (apt-get) for the rehearsal rack")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _apt(["apt-get", "update", "-qq"], env)
    plain = [pkg for pkg in packages if pkg not in HOST_NEVER_RUNS]
    if plain:
        _apt(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *plain], env)
    kept_off = [pkg for pkg in packages if pkg in HOST_NEVER_RUNS]
    if kept_off:
        _install_kept_off(kept_off, env)


def _apt(argv: list[str], env: dict) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SparkrackError(f"{' '.join(argv[:2])} failed: {last[0]}",
                             fix="install the packages by hand and retry")


def _install_kept_off(packages: list[str], env: dict) -> None:
    made = not POLICY_RC.exists()
    if made:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")  # 101: no daemon starts
        POLICY_RC.chmod(0o755)
    try:
        _apt(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env)
    finally:
        if made:
            POLICY_RC.unlink(missing_ok=True)
    for pkg in packages:
        for unit in HOST_NEVER_RUNS[pkg]:
            for link in Path("/etc/systemd/system").glob(f"**/{unit}"):
                if link.is_symlink():
                    link.unlink()


def client_key() -> str:
    """The rack's SSH client key pair (made once); returns the public key line."""
    if not CLIENT_KEY.exists():
        SSH_DIR.mkdir(parents=True, exist_ok=True)
        SSH_DIR.chmod(0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkrack-rehearsal",
                        "-f", str(CLIENT_KEY)], check=True)
    return CLIENT_KEY.with_suffix(".pub").read_text().strip()


def raise_kernel_limits(say) -> None:
    """Raise the shared kernel limits the nodes need (never lower one), saying so."""
    try:
        have = int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        return  # not Linux's procfs: nothing to size
    if have < INOTIFY_INSTANCES_FLOOR:
        INOTIFY_INSTANCES.write_text(f"{INOTIFY_INSTANCES_FLOOR}\n")
        say(f"fs.inotify.max_user_instances raised from {have} to {INOTIFY_INSTANCES_FLOOR} "
            "(the rehearsal nodes share this machine's kernel)")
