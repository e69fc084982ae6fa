"""The node's RDMA devices as the driver shows them: /sys/class/infiniband read into data.

gpusimd answers the `rdma` op with this, so that a stub engine inside a container (which
has its own sysfs and cannot see the node's simulated tree) checks its NCCL environment
against the HCAs of the node it runs on, as NCCL does with the real devices.
"""

import os

SYSFS_ROOT = "/sys/class/infiniband"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def read_hca(base: str) -> dict:
    """One HCA: port 1's state and its filled GID entries with their types."""
    port = os.path.join(base, "ports", "1")
    gids, types = {}, {}
    try:
        names = os.listdir(os.path.join(port, "gids"))
    except OSError:
        names = []
    for name in names:
        gid = _read(os.path.join(port, "gids", name))
        if gid and gid != EMPTY_GID:
            gids[name] = gid
            types[name] = _read(os.path.join(port, "gid_attrs", "types", name)) or ""
    return {"state": _read(os.path.join(port, "state")) or "", "gids": gids, "types": types}


def read_rdma(root: str = SYSFS_ROOT) -> dict:
    """{hca: {"state": "4: ACTIVE", "gids": {"3": gid}, "types": {"3": "RoCE v2"}}}."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {}
    return {name: read_hca(os.path.join(root, name)) for name in names}


def read_port_states(root: str = SYSFS_ROOT) -> dict:
    """{hca: {"state": "4: ACTIVE"}}: port 1's state alone, what NCCL's async thread
    watches (one file per HCA, not the 256 GID entries read_rdma walks)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {}
    return {name: {"state": _read(os.path.join(root, name, "ports", "1", "state")) or ""}
            for name in names}
