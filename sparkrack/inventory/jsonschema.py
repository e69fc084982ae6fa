"""The inventory as a JSON Schema (draft-07), made from the schema table itself (schema.py's
SPECS: each key's type, default, meaning, scope and choices; ranges.py's RANGES: each
number's range and the source of its figures), so that a YAML editor's
language server completes and checks `hosts.yml`, `group_vars/*.yml` and `host_vars/*.yml`
with the very rules the loader applies (`invoke validate --schema FILE`;
docs/inventory.md#validating-offline). The loader stays the judge: what a schema cannot say
(a rank used twice, tp_size against the node count, a key set where its scope forbids it)
it checks at load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrack.inventory.pdu import (
    DEFAULT_ENV,
    DEFAULT_MODEL,
    ENV_PREFIX,
    MODELS,
    OUTLET,
    PORT,
)
from sparkrack.inventory.ranges import Range
from sparkrack.inventory.schema import (
    ADDRESS,
    CONNECTION,
    ENGINES,
    FABRIC_ADDRESS,
    HOST,
    NODE,
    PDU,
    RACK,
    SOURCES,
    SPECS,
    Spec,
    plain,
)
from sparkrack.inventory.values import KIND_PATTERNS, NODE_NAME_PATTERN, RACK_NAME

DRAFT = "http://json-schema.org/draft-07/schema#"
SCHEMA_ID = "https://sparkrack.invalid/schemas/inventory.json"  # names it; fetched from nowhere
_WHERE = {RACK: "group_vars (rack-wide)", NODE: "group_vars, or per host",
          CONNECTION: "group_vars or per host", HOST: "per host only"}


def inventory_schema() -> dict[str, Any]:
    """The JSON Schema of an inventory file: a `hosts.yml` (it has `all:`; a host's entry
    takes what a host may set, a group's vars what a group may), else a vars file
    (group_vars/*.yml, host_vars/*.yml: every key, the loader judges where)."""
    return {
        "$schema": DRAFT, "$id": SCHEMA_ID,
        "title": "sparkrack inventory file (hosts.yml, group_vars/*.yml, host_vars/*.yml)",
        "description": "Made by `invoke validate --schema`; docs/inventory.md",
        "if": {"type": "object", "required": ["all"]},
        "then": {"$ref": "#/definitions/hosts"},
        "else": {"$ref": "#/definitions/vars"},
        "definitions": {"hosts": _hosts(), "vars": _vars(), "host": _host(), "group": _group(),
                        "groupVars": _vars(RACK, NODE, CONNECTION), "pdu": _pdu()},
    }


def _vars(*scopes: str) -> dict[str, Any]:
    """A mapping of inventory vars: the keys of the table set at these scopes (all of them
    by default), nothing else."""
    return {"type": ["object", "null"], "additionalProperties": False,
            "properties": {name: key_schema(spec) for name, spec in SPECS.items()
                           if not scopes or spec.scope in scopes}}


def key_schema(spec: Spec) -> dict[str, Any]:
    """One key: its type, bounds or choices, default and description."""
    schema = _value(spec)
    description = f"{spec.meaning}. Set in {_WHERE[spec.scope]}."
    if spec.range is not None:
        description += f" Range {spec.range.text()}: {spec.range.source}."
    schema["description"] = description
    if spec.default is not None and spec.type != PDU:
        schema["default"] = plain(spec.default)
    return schema


def _value(spec: Spec) -> dict[str, Any]:
    """The value's own schema, by the key's type."""
    if spec.choices is not None:
        return {"enum": list(spec.choices)}
    if spec.type is bool:
        return {"type": "boolean"}
    if spec.type in (int, float):
        return _number(spec.range, integer=spec.type is int)
    if spec.type in (ADDRESS, FABRIC_ADDRESS):
        return {"type": "string", "minLength": 1, "pattern": "^[^%\\s]+$"}
    if spec.type == PDU:
        return {"$ref": "#/definitions/pdu"}
    if spec.type == tuple[str, ...]:
        return {"type": "array", "minItems": 1, "items": _text(spec)}
    if spec.type == SOURCES or spec.type == Mapping[str, str]:
        return {"type": "object", "additionalProperties": False,
                "minProperties": 0 if spec.type == SOURCES else 1,
                "properties": {engine: _text(spec) for engine in ENGINES}}
    return _text(spec)


def _number(found: Range | None, *, integer: bool) -> dict[str, Any]:
    """A number within its range (ranges.py): the bounds a YAML editor checks."""
    schema: dict[str, Any] = {"type": "integer" if integer else "number"}
    if found is not None and found.low is not None:
        schema["exclusiveMinimum" if found.low_open else "minimum"] = found.low
    if found is not None and found.high is not None:
        schema["maximum"] = found.high
    return schema


def _text(spec: Spec) -> dict[str, Any]:
    """A text value: not blank; the pattern of its kind where one regular expression says
    it (the other kinds' rules are the loader's)."""
    pattern = KIND_PATTERNS.get(spec.kind)
    schema: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": "\\S"}
    if pattern is not None:
        schema["pattern"] = f"^{pattern.pattern}$"
    return schema


def _pdu() -> dict[str, Any]:
    """The `pdu:` section (pdu.py's keys and limits)."""
    env = {"type": "string", "pattern": f"^{ENV_PREFIX}[A-Z0-9_]{{1,50}}$"}
    return {
        "type": "object", "additionalProperties": False,
        "description": "the switched, metered PDU feeding the rack (docs/inventory.md#the-pdu)",
        "required": ["name", "address", "outlets"],
        "properties": {
            "name": {"type": "string", "pattern": f"^{KIND_PATTERNS[RACK_NAME].pattern}$",
                     "description": "the PDU's name, shown in output and the audit log"},
            "address": {"type": "string", "minLength": 1, "pattern": "^[^%\\s]+$",
                        "description": "its management address (SNMP over UDP)"},
            "model": {"enum": list(MODELS), "default": DEFAULT_MODEL,
                      "description": "the PDU's family: the MIB sparkrack speaks to it"},
            "port": {**_number(PORT, integer=True), "default": 161,
                     "description": f"its SNMP port. Range {PORT.text()}: {PORT.source}."},
            "outlets": {"type": "object", "minProperties": 1,
                        "description": "the outlet each node's power cord is in. Range "
                                       f"{OUTLET.text()}: {OUTLET.source}.",
                        "propertyNames": {"pattern": f"^{NODE_NAME_PATTERN.pattern}$"},
                        "additionalProperties": _number(OUTLET, integer=True)},
            **{key: {**env, "default": default,
                     "description": "the environment variable holding the SNMPv3 "
                                    f"{key.removesuffix('_env').replace('_', ' ')}"}
               for key, default in DEFAULT_ENV.items()},
        },
    }


def _hosts() -> dict[str, Any]:
    """hosts.yml: all: {vars:, children: {GROUP: {hosts: {NODE: vars}, vars:}}}."""
    return {"type": "object", "additionalProperties": False, "required": ["all"],
            "properties": {"all": {
                "type": "object", "additionalProperties": False,
                "properties": {"vars": {"$ref": "#/definitions/groupVars"},
                               "children": {"type": "object",
                                            "propertyNames": _name(),
                                            "additionalProperties": {
                                                "$ref": "#/definitions/group"}}}}}}


def _group() -> dict[str, Any]:
    return {"type": ["object", "null"], "additionalProperties": False,
            "properties": {"hosts": {"type": ["object", "null"], "propertyNames": _name(),
                                     "additionalProperties": {"$ref": "#/definitions/host"}},
                           "vars": {"$ref": "#/definitions/groupVars"}}}


def _host() -> dict[str, Any]:
    """A host's own vars (hosts.yml, host_vars/NODE.yml): no rack var but what a host may
    override."""
    return _vars(NODE, CONNECTION, HOST)


def _name() -> dict[str, Any]:
    """A host or group name (values.is_node_name: never `all`)."""
    return {"pattern": f"^{NODE_NAME_PATTERN.pattern}$", "not": {"const": "all"}}
