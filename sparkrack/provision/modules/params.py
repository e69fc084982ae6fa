"""A module's parameters, declared once in its own file as ansible-core's `argument_spec`
declares them: type, required, default, choices, a number's range with its source, and
what the parameter means. The roles' loader checks every task against them when the roles
load; a value written as a template is checked again once rendered for a node
(docs/provisioning.md#module-parameters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from sparkrack.core.errors import allowed_fix, did_you_mean
from sparkrack.inventory.ranges import Range
from sparkrack.inventory.schema import describe, yaml_text

DOCS = "docs/provisioning.md#module-parameters"
_MODE = re.compile(r"[0-7]{3,4}")


def _is_text(value: Any) -> bool:  # a number is taken as text too (ansible's str converts)
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_strings(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, (list, tuple))
                                      and all(_is_text(item) for item in value))


TYPES = {  # type -> (what a value of it is, in words; whether a value is one)
    "str": ("a string", _is_text),
    "bool": ("true or false", lambda value: isinstance(value, bool)),
    "number": ("a number", _is_number),
    "list": ("a list of strings", lambda value: isinstance(value, (list, tuple))
             and all(_is_text(item) for item in value)),
    "strings": ("a string or a list of strings", _is_strings),
    "dict": ("a mapping", lambda value: isinstance(value, Mapping)),
    "mode": ("an octal mode in quotes ('0644'; unquoted, YAML reads a number)",
             lambda value: isinstance(value, str) and bool(_MODE.fullmatch(value))),
}


def templated(value: Any) -> bool:
    """Whether value holds a Jinja2 template anywhere (rendered per node, checked then)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(templated(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(templated(item) for item in value)
    return False


def written(value: Any) -> str:
    """value as a role file writes it: quoted where YAML would read it as something else
    ('0644', not 0644)."""
    text = yaml_text(value)
    if isinstance(value, str) and yaml.safe_load(text) != value:
        return f"'{value}'"
    return text


@dataclass(frozen=True)
class Problem:
    """Why one parameter is refused: message and fix, and the line of the role file it is
    at (None: the module's line, for a parameter that is missing)."""

    message: str
    fix: str
    line: int | None = None


@dataclass(frozen=True)
class Param:
    """One parameter of a module.

    type: a key of TYPES. about: what it means (the docs' table and the fix of a missing
    one). example: a value that is right (an error's fix). late: left unrendered until plan
    time, then evaluated with `facts`. options: a mapping's own parameters.
    """

    type: str
    about: str
    example: Any
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    range: Range | None = None
    options: Mapping[str, Param] | None = None
    late: bool = False

    def expected(self) -> str:
        """What a right value is, in words: 'one of: a, b', 'a number in 0..300 s'."""
        if self.choices:
            return "one of: " + ", ".join(self.choices)
        within = f" in {self.range.text()}" if self.range is not None else ""
        return TYPES[self.type][0] + within

    def fix(self, name: str) -> str:
        """The fix of a wrong or missing value: a right one."""
        return f"e.g. {name}: {written(self.example)}"

    def problem(self, name: str, value: Any, *, rendered: bool = True) -> Problem | None:
        """Why value is refused for this parameter, or None. Not rendered: what a template
        makes is taken as it is (its rendering decides; it is checked once rendered)."""
        if not rendered and isinstance(value, str) and templated(value):
            return None
        if self.options is not None and isinstance(value, Mapping):
            return check_params(self.options, value, name, rendered=rendered)
        literal = value
        if not rendered and isinstance(value, (list, tuple)):
            literal = [item for item in value if not templated(item)]
        got = f"{name}: expected {self.expected()}, got {describe(value)}"
        if not TYPES[self.type][1](literal):
            return Problem(got, self.fix(name))
        if self.choices and value not in self.choices:
            return Problem(got + did_you_mean(str(value), self.choices), self.fix(name))
        out = self.range.problem(value) if self.range is not None else None
        return Problem(f"{name}: {out}", self.fix(name)) if out else None


def check_params(spec: Mapping[str, Param], params: Mapping[str, Any], label: str, *,
                 rendered: bool = False) -> Problem | None:
    """The first thing wrong with params against spec (label: the module's name, or the
    mapping parameter's): an unknown parameter, a missing one, a wrong value."""
    lines = getattr(params, "lines", {})
    for name in params:
        if name not in spec:
            return Problem(f"{label}: unknown parameter '{name}'"
                           + did_you_mean(str(name), spec),
                           allowed_fix(f"{label}'s parameters", sorted(spec), DOCS),
                           lines.get(name))
    for name, param in spec.items():
        if param.required and name not in params:
            return Problem(f"{label}: missing {name} ({param.about})", param.fix(name))
    for name, value in params.items():
        found = spec[name].problem(name, value, rendered=rendered)
        if found is not None:
            return Problem(f"{label}: {found.message}", found.fix,
                           found.line or lines.get(name))
    return None


def with_defaults(spec: Mapping[str, Param], params: Mapping[str, Any]) -> dict[str, Any]:
    """params with each parameter left out that has a default set to it."""
    return {**{name: param.default for name, param in spec.items()
               if param.default is not None and name not in params}, **params}
