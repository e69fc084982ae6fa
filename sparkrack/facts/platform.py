"""A node's Python interpreter, as far as compiled extension modules care: what the
watchdog's shipped lib/ must match (its facts: facts/watchdog.py)."""

from __future__ import annotations

import json
import platform
import sys
import sysconfig
from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """An interpreter as far as compiled extension modules care."""

    version: tuple[int, ...]  # (3, 11, 2)
    machine: str  # x86_64, aarch64
    soabi: str  # cpython-311-x86_64-linux-gnu
    libc: tuple[str, str]  # ("glibc", "2.36")
    executable: str = ""

    @classmethod
    def local(cls) -> Platform:
        return cls(tuple(sys.version_info[:3]), platform.machine(),
                   sysconfig.get_config_var("SOABI") or "", tuple(platform.libc_ver()),
                   sys.executable)

    @classmethod
    def parse(cls, text: str) -> Platform:
        """The output of remote/watchdog.py's PLATFORM_SCRIPT; ValueError when it is not that."""
        data = json.loads(text.strip().splitlines()[-1])
        return cls(tuple(int(v) for v in data["version"]), str(data["machine"]),
                   str(data["soabi"] or ""), tuple(str(v) for v in data["libc"]),
                   str(data.get("executable", "")))

    def describe(self) -> str:
        libc = " ".join(v for v in self.libc if v) or "unknown libc"
        return (f"Python {'.'.join(map(str, self.version))} {self.machine} "
                f"({self.soabi or 'no SOABI'}, {libc})")
