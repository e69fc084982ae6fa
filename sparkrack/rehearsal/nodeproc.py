"""One rehearsal node as a process tree: launch, find its init, reboot, shut down, power cut.

A node is a detached launcher that joins the node's own cgroups, enters a private mount
namespace, mounts the node's overlay root and runs `systemd-nspawn -b` in a loop: exit
code 133 (a `systemctl reboot` inside) boots it again, anything else ends the launcher.
Each boot starts with the ConnectX-7 netdevs reset (no address, MTU 1500), as a real
reboot leaves them for the node's network config.
"""

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from sparkrack.rehearsal.layout import HCAS, NodeLayout

NSPAWN_EXIT_REBOOT = 133


def launcher_script(node: NodeLayout) -> str:
    """The shell launcher of one node; every path is quoted."""
    q = shlex.quote
    cgroups = " ".join(q(str(c)) for c in node.cgroups())
    # --console=read-only: the node's console output is read, into its console log. A
    # console nobody reads (passive) fills its pty, and then the node's systemd blocks on
    # its next console line: seen as a reboot that never ended, PID 1 stuck in
    # systemd-shutdown writing to /dev/console.
    nspawn = [
        "systemd-nspawn", "-D", str(node.root), "-b", "--register=no", "--keep-unit",
        "--console=read-only", "--capability=all", "--system-call-filter=@keyring bpf",
        f"--network-namespace-path=/run/netns/{node.netns}", f"--hostname={node.name}",
        f"--machine={node.name}",
        f"--bind={node.state}/docker:/var/lib/docker",
        f"--bind={node.state}/containerd:/var/lib/containerd",
    ]
    inner = "\n".join([
        "set -e",
        "mkdir -p /run/systemd/nspawn",
        "mount -t tmpfs tmpfs /run/systemd/nspawn",
        f"mount -t overlay overlay -o lowerdir=/,upperdir={q(str(node.upper))},"
        f"workdir={q(str(node.work))} {q(str(node.root))}",
        "set +e",
        "while :; do",
        # a boot resets the ConnectX-7's netdevs as the driver does on real hardware: no
        # address, the kernel's MTU, until the node's network config sets them again
        *(f"  ip -n {q(node.netns)} addr flush dev {q(netdev)} 2>/dev/null; "
          f"ip -n {q(node.netns)} link set dev {q(netdev)} mtu 1500 2>/dev/null"
          for netdev in HCAS.values()),
        f"  date +%s >> {q(str(node.boots_log))}",
        f"  SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 {shlex.join(nspawn)}",
        "  rc=$?",
        f"  [ $rc -eq {NSPAWN_EXIT_REBOOT} ] || exit $rc",
        "done",
    ])
    return "\n".join([
        "#!/bin/sh",
        f"# rehearsal node {node.name}: written by `invoke rehearsal.up`",
        f"for cg in {cgroups}; do mkdir -p \"$cg\" && echo $$ > \"$cg/cgroup.procs\"; done",
        f"exec unshare --mount --propagation private /bin/sh -c {q(inner)}",
        "",
    ])


def launch(node: NodeLayout) -> int:
    """Start the node's launcher detached from us; returns its pid."""
    for path in (node.run, node.root, node.state / "docker", node.state / "containerd",
                 node.upper, node.work):
        path.mkdir(parents=True, exist_ok=True)
    script = node.run / "launcher.sh"
    script.write_text(launcher_script(node))
    script.chmod(0o755)
    with open(node.console_log, "ab") as log:
        proc = subprocess.Popen([str(script)], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    node.launcher_pid.write_text(f"{proc.pid}\n")
    return proc.pid


def pids(node: NodeLayout) -> list[int]:
    """Every process of the node (launcher, nspawn, the node's systemd and all below)."""
    found: list[int] = []
    root = node.cgroups()[0]
    if not root.is_dir():
        return found
    for dirpath, _dirs, files in os.walk(root):
        if "cgroup.procs" in files:
            try:
                text = (Path(dirpath) / "cgroup.procs").read_text()
            except OSError:  # the cgroup went away while we walked (ENODEV, ENOENT)
                continue
            found += [int(p) for p in text.split()]
    return found


def init_pid(node: NodeLayout) -> int | None:
    """The host pid of the node's systemd (PID 1 inside), or None when not booted."""
    procs = node.cgroups()[0] / "payload" / "init.scope" / "cgroup.procs"
    try:
        found = procs.read_text().split()
    except OSError:
        return None
    return int(found[0]) if found else None


def is_running(node: NodeLayout) -> bool:
    """Whether any process of the node is alive."""
    return bool(pids(node))


def in_node(node: NodeLayout, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    """Run argv inside the booted node's namespaces (no SSH: the rack's own back door)."""
    pid = init_pid(node)
    if pid is None:
        raise RuntimeError(f"{node.name} is not booted")
    return subprocess.run(["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "--", *argv],
                          capture_output=True, text=True, timeout=timeout)


def reboot(node: NodeLayout) -> None:
    """A clean reboot: SIGINT to the node's systemd starts ctrl-alt-del (reboot.target)."""
    pid = init_pid(node)
    if pid is None:
        raise RuntimeError(f"{node.name} is not booted")
    os.kill(pid, signal.SIGINT)


def power_cut(node: NodeLayout) -> None:
    """SIGKILL every process of the node and drop its cgroups: the power cord is pulled."""
    deadline = time.monotonic() + 10
    while (alive := pids(node)) and time.monotonic() < deadline:
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for root in node.cgroups():
        remove_cgroup_tree(root)
    node.launcher_pid.unlink(missing_ok=True)


def shutdown(node: NodeLayout, timeout: float = 20) -> None:
    """A clean power-off (SIGRTMIN+4 to the node's systemd), then a power cut if it hangs."""
    pid = init_pid(node)
    if pid is not None:
        os.kill(pid, signal.SIGRTMIN + 4)
        deadline = time.monotonic() + timeout
        while init_pid(node) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    power_cut(node)


def remove_cgroup_tree(root: Path) -> None:
    """rmdir a cgroup directory tree depth-first (cgroupfs only allows empty rmdir)."""
    if not root.is_dir():
        return
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


def boot_times(node: NodeLayout) -> list[int]:
    """Epoch seconds of every boot of the node, oldest first."""
    try:
        return [int(x) for x in node.boots_log.read_text().split()]
    except OSError:
        return []
