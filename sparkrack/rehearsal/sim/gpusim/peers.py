"""Which process holds a client connection, and whether it runs (stdlib only).

A CUDA context belongs to a process: its kernels run only while the host process feeds
them. gpusimd learns a client's process the way `ss -tp` does: the connection's socket
inode from /proc/net/tcp, then the process whose /proc/PID/fd holds that socket (the rank
containers share the node's network namespace and are visible in its /proc). Whether the
process runs is its state in /proc/PID/stat: `T` (stopped: SIGSTOP, a host-side freeze)
or `t` (stopped by a debugger) runs nothing.
"""

import os

STOPPED_STATES = ("T", "t")
CGROUP_ROOT = "/sys/fs/cgroup"


def _hex_endpoint(address: tuple[str, int]) -> str:
    """127.0.0.1:47800 as /proc/net/tcp spells it: 0100007F:BAB8."""
    host, port = address
    packed = bytes(int(part) for part in host.split("."))
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def socket_inode(local: tuple[str, int], remote: tuple[str, int],
                 table: str = "/proc/net/tcp") -> int | None:
    """The inode of the TCP socket whose local end is `local` and remote end `remote`."""
    want = (_hex_endpoint(local), _hex_endpoint(remote))
    try:
        with open(table, encoding="ascii") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                if len(fields) > 9 and (fields[1], fields[2]) == want:
                    return int(fields[9])
    except (OSError, ValueError):
        return None
    return None


def process_of(inode: int, proc: str = "/proc") -> int | None:
    """The pid of a process holding socket `inode` (None: none found)."""
    target = f"socket:[{inode}]"
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fds = os.path.join(proc, entry, "fd")
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(os.path.join(fds, name)) == target:
                    return int(entry)
            except OSError:
                continue
    return None


def peer_pid(server: tuple[str, int], client: tuple[str, int]) -> int | None:
    """The pid of the process at the client end of a connection to server."""
    inode = socket_inode(client, server)
    return None if inode is None else process_of(inode)


def frozen(pid: int, proc: str = "/proc", root: str = CGROUP_ROOT) -> bool:
    """Whether process pid's cgroup is frozen (docker pause), v1's freezer or v2's."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "freezer" in controllers.split(","):
            state = _read(os.path.join(root, "freezer") + path + "/freezer.state")
            if state in ("FROZEN", "FREEZING"):
                return True
        elif controllers == "":  # the unified hierarchy: mounted at root, or at unified/
            for base in (root, os.path.join(root, "unified")):
                events = _read(base + path.rstrip("/") + "/cgroup.events")
                if events is not None:
                    if "frozen 1" in events.splitlines():
                        return True
                    break
    return False


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def stopped(pid: int | None) -> bool:
    """Whether process pid runs nothing: stopped, or frozen by its cgroup (False when
    unknown or gone)."""
    if pid is None:
        return False
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return False
    return text[text.rfind(")") + 2:][:1] in STOPPED_STATES or frozen(pid)
