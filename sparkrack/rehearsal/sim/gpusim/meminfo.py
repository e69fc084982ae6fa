"""The node's /proc/meminfo view of the unified memory pool, rewritten in place.

GPU allocations come out of the same pool as the OS: MemAvailable = MemTotal - OS use -
allocations, MemFree = MemAvailable - reclaimable page cache. The file is rewritten
through the same inode (never renamed) because it is bind-mounted over /proc/meminfo.
"""

import os


def meminfo_values(config: dict, allocated_kb: int, cma: tuple[int, int] = (0, 0)) -> dict:
    """The kB numbers of every meminfo line for this much allocated GPU memory and the
    kernel's (CmaTotal, CmaFree)."""
    total = config["mem_total_kb"]
    available = max(0, total - config["os_used_kb"] - allocated_kb)
    cache = min(config["page_cache_kb"], available)
    buffers = min(cache // 64, 65536)
    anon = max(0, config["os_used_kb"] - cache) + allocated_kb
    slab = 1048576
    return {
        "MemTotal": total,
        "MemFree": available - cache,
        "MemAvailable": available,
        "Buffers": buffers,
        "Cached": cache - buffers,
        "SwapCached": 0,
        "Active": anon // 2 + cache // 2,
        "Inactive": anon - anon // 2 + cache - cache // 2,
        "Active(anon)": anon // 2,
        "Inactive(anon)": anon - anon // 2,
        "Active(file)": cache // 2,
        "Inactive(file)": cache - cache // 2,
        "Unevictable": 30720,
        "Mlocked": 30720,
        "SwapTotal": config["swap_total_kb"],
        "SwapFree": config["swap_total_kb"],
        "Zswap": 0,
        "Zswapped": 0,
        "Dirty": 128,
        "Writeback": 0,
        "AnonPages": anon,
        "Mapped": 524288,
        "Shmem": 163840,
        "KReclaimable": slab // 2,
        "Slab": slab,
        "SReclaimable": slab // 2,
        "SUnreclaim": slab - slab // 2,
        "KernelStack": 24576,
        "ShadowCallStack": 6144,
        "PageTables": 65536,
        "SecPageTables": 0,
        "NFS_Unstable": 0,
        "Bounce": 0,
        "WritebackTmp": 0,
        "CommitLimit": total // 2 + config["swap_total_kb"],
        "Committed_AS": anon + 4194304,
        "VmallocTotal": 133141626880,
        "VmallocUsed": 262144,
        "VmallocChunk": 0,
        "Percpu": 20480,
        "HardwareCorrupted": 0,
        "AnonHugePages": 0,
        "ShmemHugePages": 0,
        "ShmemPmdMapped": 0,
        "FileHugePages": 0,
        "FilePmdMapped": 0,
        "CmaTotal": cma[0],
        "CmaFree": cma[1],
        "Balloon": 0,
        "HugePages_Total": 0,
        "HugePages_Free": 0,
        "HugePages_Rsvd": 0,
        "HugePages_Surp": 0,
        "Hugepagesize": 2048,
        "Hugetlb": 0,
    }


def render_meminfo(values: dict) -> str:
    """/proc/meminfo text: 'Key:' padded to 16 columns, kB unless a page count."""
    lines = []
    for key, value in values.items():
        if key.startswith("HugePages_"):
            lines.append(f"{key + ':':<16}{value:>8}")
        else:
            lines.append(f"{key + ':':<16}{value:>8} kB")
    return "\n".join(lines) + "\n"


def write_in_place(path: str, text: str) -> None:
    """Replace the file's content through its existing inode (created if missing)."""
    data = text.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
