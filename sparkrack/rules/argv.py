"""Reading a launch spec's argv the way the engine's argparse would: flags and numbers."""

from __future__ import annotations

import re
from collections.abc import Callable

_SUFFIX = re.compile(r"([0-9]*\.?[0-9]+)([kKmMgG])")
_SCALE = {"k": 10**3, "K": 2**10, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}


def flag_values(argv: tuple[str, ...],
                canonical: Callable[[str], str] | None = None) -> dict[str, str | bool]:
    """Each --flag of argv with its value; True for a bare switch; the last occurrence wins.

    `--flag=value` and `--flag value` are both read; a flag followed by another flag (or
    by nothing) is a switch. Words before the first flag (entrypoint, positionals) are skipped.
    canonical names each flag as the engine reads it (option_names: a prefix or another
    name of an option counts as that option), so that the rules compare exact names.
    """
    flags: dict[str, str | bool] = {}
    for i, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        if "=" in word:
            flag, value = word.split("=", 1)
        else:
            following = argv[i + 1] if i + 1 < len(argv) else None
            flag, value = word, True if following is None or following.startswith("--") \
                else following
        if canonical is not None:
            flag = canonical(flag)
        flags[flag] = value
    return flags


def number(text: str | bool | None) -> float | None:
    """text as a number, None when it is none; vLLM's token suffixes count (1k = 1000,
    1K = 1024, and m/M, g/G alike)."""
    if not isinstance(text, str):
        return None
    try:
        return float(text)
    except ValueError:
        pass
    scaled = _SUFFIX.fullmatch(text.strip())
    return None if scaled is None else float(scaled[1]) * _SCALE[scaled[2]]


def address_part(value: str, with_port: bool) -> str:
    """The host of HOST:PORT (brackets of [IPv6]:PORT removed), or value itself."""
    host = value.rsplit(":", 1)[0] if with_port and ":" in value else value
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
