"""The inventory's `pdu:` section (docs/inventory.md#the-pdu): `parse_pdu` checks the
section's own shape (ValueError naming the key); the loader checks it against the hosts
(every member on an outlet, no outlet twice).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack.inventory.values import address_problem

DEFAULT_ENV = {"user_env": "SPARKRACK_PDU_USER", "auth_key_env": "SPARKRACK_PDU_AUTH_KEY",
               "priv_key_env": "SPARKRACK_PDU_PRIV_KEY"}
KEYS = ("name", "address", "port", "outlets", *DEFAULT_ENV)
MAX_OUTLET = 96  # the largest rack PDUs carry 48 outlets; room for two daisy-chained
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # a name, shown; anything else may be a key
# the only variables the section may name: the service's EnvironmentFile holds them (so not
# LD_PRELOAD, PYTHONPATH) and every record masks their values (oplock/masking.py)
ENV_PREFIX = "SPARKRACK_PDU_"
_PDU_ENV_NAME = re.compile(ENV_PREFIX + r"[A-Z0-9_]{1,50}")
_PDU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
EXAMPLE = ("e.g. pdu: {name: strip-a, address: 192.0.2.60, outlets: {spark-01: 1, "
           "spark-02: 2}}")


ENV_FIX = (f"name the variable holding it, {ENV_PREFIX} and upper-case letters, digits or "
           f"'_' (e.g. auth_key_env: {DEFAULT_ENV['auth_key_env']}), or leave the key out "
           "for its default")


class SectionError(ValueError):
    """A mistake in the section with a fix of its own (not the section's example), at the
    line of its key when the section came from a file (None: the section's line)."""

    def __init__(self, message: str, fix: str, line: int | None = None):
        super().__init__(message)
        self.fix = fix
        self.line = line


@dataclass(frozen=True)
class PduConfig:
    """The PDU as the inventory names it; the credentials are the environment's."""

    name: str
    address: str
    outlets: tuple[tuple[str, int], ...]  # (node, outlet), in the inventory's order
    port: int = 161
    user_env: str = DEFAULT_ENV["user_env"]
    auth_key_env: str = DEFAULT_ENV["auth_key_env"]
    priv_key_env: str = DEFAULT_ENV["priv_key_env"]

    def outlet_of(self, node: str) -> int | None:
        """The outlet feeding node, or None when it is on none."""
        return dict(self.outlets).get(node)

    def node_on(self, outlet: int) -> str | None:
        """The node an outlet feeds, or None."""
        return {number: node for node, number in self.outlets}.get(outlet)


def parse_pdu(value: Any) -> PduConfig:
    """The section as a PduConfig; ValueError naming the key and what it should be."""
    if not isinstance(value, Mapping):
        raise ValueError(f"pdu: expected a mapping, got {type(value).__name__}")
    unknown = [key for key in value if key not in KEYS]
    if unknown:
        raise ValueError(f"pdu: unknown key '{unknown[0]}' (allowed: {', '.join(KEYS)})")
    for key in ("name", "address", "outlets"):
        if key not in value:
            raise ValueError(f"pdu: '{key}' is missing")
    name = value["name"]
    if not isinstance(name, str) or not _PDU_NAME.fullmatch(name):
        raise ValueError(f"pdu: name: {name!r} is not a name (letters, digits, '.', '_', '-')")
    problem = address_problem(value["address"])
    if problem:
        raise ValueError(f"pdu: address: {value['address']!r} {problem}")
    port = value.get("port", 161)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"pdu: port: expected an integer 1..65535, got {port!r}")
    env = {key: value.get(key, default) for key, default in DEFAULT_ENV.items()}
    lines = getattr(value, "lines", {})
    for key, variable in env.items():
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            raise SectionError(f"pdu: {key}: not an environment variable name (upper-case "
                               "letters, digits, '_'; the value is not shown: it may be the "
                               "secret itself)", ENV_FIX,
                               lines.get(key))
        if not _PDU_ENV_NAME.fullmatch(variable):
            raise SectionError(f"pdu: {key}: {variable} is not a {ENV_PREFIX}* variable: the "
                               f"PDU's user and keys come only from {ENV_PREFIX}* variables "
                               "(the watchdog's root service is given them, and every record "
                               "masks their values)", ENV_FIX, lines.get(key))
    return PduConfig(name, value["address"], _outlets(value["outlets"]), port, **env)


def _outlets(value: Any) -> tuple[tuple[str, int], ...]:
    """The node-to-outlet map; ValueError for a non-mapping, a bad number or a reused one."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError("pdu: outlets: expected a mapping of node to outlet number")
    seen: dict[int, str] = {}
    for node, outlet in value.items():
        if not isinstance(outlet, int) or isinstance(outlet, bool) or not 1 <= outlet <= MAX_OUTLET:
            raise ValueError(f"pdu: outlets: {node}: expected an outlet number 1..{MAX_OUTLET}, "
                             f"got {outlet!r}")
        if outlet in seen:
            raise ValueError(f"pdu: outlets: outlet {outlet} is given to both {seen[outlet]} "
                             f"and {node}")
        seen[outlet] = str(node)
    return tuple((str(node), outlet) for node, outlet in value.items())
