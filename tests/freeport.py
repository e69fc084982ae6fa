"""A TCP port on loopback for a server a test starts, picked outside the kernel's ephemeral
range: a port bound to 0 and let go comes from that range, where any outgoing connection
(the suite's SSH sessions, another run's) can take it before the server binds it. Picked at
random below the range and checked free, two runs beside each other rarely meet.
docs/internals.md#the-test-suite
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(n) for n in RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port of kind (TCP; socket.SOCK_DGRAM: UDP) nothing holds at host now, below the
    ephemeral range."""
    low, _ = ephemeral_range()
    pick = random.SystemRandom()
    for _ in range(200):
        port = pick.randrange(LOWEST, max(low, LOWEST + 1000))
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {low} on {host}")
