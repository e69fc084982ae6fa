"""The inventory's `pdu:` section (docs/inventory.md#the-pdu): `parse_pdu` checks the
section's own shape (ValueError naming the key); the loader checks it against the hosts
(every member on an outlet, no outlet twice).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack.core.errors import did_you_mean
from sparkrack.inventory.ranges import RANGES
from sparkrack.inventory.values import address_problem

DEFAULT_ENV = {"user_env": "SPARKRACK_PDU_USER", "auth_key_env": "SPARKRACK_PDU_AUTH_KEY",
               "priv_key_env": "SPARKRACK_PDU_PRIV_KEY"}
KEYS = ("name", "model", "address", "port", "outlets", *DEFAULT_ENV)
# the models sparkrack speaks (sparkrack/pdu/families.py; docs/inventory.md#the-pdu)
MODELS = ("apc-rpdu2", "sentry4-switched", "sentry4-metered")
DEFAULT_MODEL = MODELS[0]
PORT, OUTLET = RANGES["pdu.port"], RANGES["pdu.outlets"]
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # a name, shown; anything else may be a key
# the only variables the section may name: the service's EnvironmentFile holds them (so not
# LD_PRELOAD, PYTHONPATH) and every record masks their values (oplock/masking.py)
ENV_PREFIX = "SPARKRACK_PDU_"
_PDU_ENV_NAME = re.compile(ENV_PREFIX + r"[A-Z0-9_]{1,50}")
_PDU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
EXAMPLE = "e.g. pdu: {name: strip-a, address: 192.0.2.60, outlets: {spark-01: 1, ...}}"


ENV_FIX = f"e.g. auth_key_env: {DEFAULT_ENV['auth_key_env']}"


class SectionError(ValueError):
    """A mistake in the section, at the line of the value that is wrong when the section came
    from a file (None: the section's own line); fix: its own fix (None: the section's
    example)."""

    def __init__(self, message: str, fix: str | None = None, line: int | None = None):
        super().__init__(message)
        self.fix = fix
        self.line = line


def _line(mapping: Any, key: Any) -> int | None:
    """The line of key in a mapping read with its lines (yamlfile.YamlMapping), or None."""
    return getattr(mapping, "lines", {}).get(key)


@dataclass(frozen=True)
class PduConfig:
    """The PDU as the inventory names it; the credentials are the environment's."""

    name: str
    address: str
    outlets: tuple[tuple[str, int], ...]  # (node, outlet), in the inventory's order
    port: int = 161
    model: str = DEFAULT_MODEL
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
    """The section as a PduConfig; SectionError naming the key, what it should be and the
    line of the value."""
    if not isinstance(value, Mapping):
        raise SectionError(f"pdu: expected a mapping, got {type(value).__name__}")
    unknown = [key for key in value if key not in KEYS]
    if unknown:
        raise SectionError(f"pdu: unknown key '{unknown[0]}'{did_you_mean(str(unknown[0]), KEYS)}",
                           f"allowed: {', '.join(KEYS)}", _line(value, unknown[0]))
    for key in ("name", "address", "outlets"):
        if key not in value:
            raise SectionError(f"pdu: '{key}' is missing")
    name = value["name"]
    if not isinstance(name, str) or not _PDU_NAME.fullmatch(name):
        raise SectionError(f"pdu: name: {name!r} is not a name (letters, digits, '.', '_', "
                           "'-')", "e.g. name: strip-a", _line(value, "name"))
    problem = address_problem(value["address"])
    if problem:
        raise SectionError(f"pdu: address: {value['address']!r} {problem}",
                           "e.g. address: 192.0.2.60", _line(value, "address"))
    port = value.get("port", 161)
    if not isinstance(port, int) or isinstance(port, bool):
        raise SectionError(f"pdu: port: expected an integer in {PORT.text()}, got {port!r}",
                           "e.g. port: 161 (SNMP's)", _line(value, "port"))
    if PORT.problem(port):
        raise SectionError(f"pdu: port: {PORT.problem(port)}", "e.g. port: 161 (SNMP's)",
                           _line(value, "port"))
    env = {key: value.get(key, default) for key, default in DEFAULT_ENV.items()}
    for key, variable in env.items():
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            raise SectionError(f"pdu: {key}: not an environment variable name (not shown: "
                               "it may be the secret itself)", ENV_FIX, _line(value, key))
        if not _PDU_ENV_NAME.fullmatch(variable):
            raise SectionError(f"pdu: {key}: {variable} is not a {ENV_PREFIX}* variable, the "
                               "only ones the watchdog gets", ENV_FIX, _line(value, key))
    model = value.get("model", DEFAULT_MODEL)
    if model not in MODELS:
        raise SectionError(f"pdu: model: {model!r} is not a model sparkrack speaks",
                           f"one of {', '.join(MODELS)} (docs/inventory.md#the-pdu)",
                           _line(value, "model"))
    return PduConfig(name, value["address"], _outlets(value["outlets"], _line(value, "outlets")),
                     port, model, **env)


def _outlets(value: Any, line: int | None) -> tuple[tuple[str, int], ...]:
    """The node-to-outlet map; SectionError for a non-mapping, a bad number or a reused one,
    at its own line (line: the `outlets:` key's)."""
    if not isinstance(value, Mapping) or not value:
        raise SectionError("pdu: outlets: expected a mapping of node to outlet number",
                           "e.g. outlets: {spark-01: 1, spark-02: 2}", line)
    seen: dict[int, str] = {}
    for node, outlet in value.items():
        at = _line(value, node) or line
        if not isinstance(outlet, int) or isinstance(outlet, bool) or OUTLET.problem(outlet):
            problem = (OUTLET.problem(outlet) if isinstance(outlet, int)
                       and not isinstance(outlet, bool) else
                       f"expected an outlet number in {OUTLET.text()}, got {outlet!r}")
            raise SectionError(f"pdu: outlets: {node}: {problem}",
                               "the number printed on the PDU beside the node's cord", at)
        if outlet in seen:
            raise SectionError(f"pdu: outlets: outlet {outlet} is given to both "
                               f"{seen[outlet]} and {node}", "one node per outlet", at)
        seen[outlet] = str(node)
    return tuple((str(node), outlet) for node, outlet in value.items())


def outlets_problem(config: PduConfig, source: Any, members: list[str],
                    spares: list[str]) -> tuple[int | None, str, str] | None:
    """(line, what is wrong, fix) unless the outlets name hosts of hosts.yml (members or
    spares) and every member has one; source: the section as read (its lines)."""
    mapped = [node for node, _ in config.outlets]
    outlets = source.get("outlets") if isinstance(source, dict) else None
    outlets_line = _line(source, "outlets")
    strangers = [node for node in mapped if node not in members + spares]
    if strangers:
        return (_line(outlets, strangers[0]) or outlets_line,
                f"pdu: outlets: '{strangers[0]}' is not a host of "
                f"hosts.yml{did_you_mean(strangers[0], members)}",
                "map each node of hosts.yml to the outlet its power cord is in")
    unmapped = [node for node in members if node not in mapped]
    if unmapped:
        return (outlets_line, f"pdu: outlets: {', '.join(unmapped)} on no outlet",
                "the PDU is the rack's strip: give every node the outlet its power cord is in")
    return None
