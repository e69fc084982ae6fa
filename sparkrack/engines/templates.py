"""Per-rank argument templates: `{placeholder}` fields filled from the inventory and the rank.

Only plain names are allowed (no format specs, conversions, attributes or indexes), so a
template is checked once when its file loads and filling it cannot fail later.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping

RANK_FIELDS = ("model_path", "model_name", "tp_size", "nnodes", "rank", "head_roce_addr",
               "drain_budget_s")
"""Placeholders every template may use; each declared port adds `<port>_port`."""


def allowed_fields(port_names: Iterable[str]) -> tuple[str, ...]:
    """Every placeholder a template may use, given the engine's port names."""
    return (*RANK_FIELDS, *(f"{name}_port" for name in port_names))


def check_template(template: str, allowed: Iterable[str]) -> str | None:
    """None if template is valid with these placeholders, else what is wrong with it."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        return f"{template!r}: {error} (write a literal brace as {{{{ or }}}})"
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if spec or conversion:
            return f"{template!r}: write {{{field}}} without a format or conversion"
        if field not in allowed:
            return f"{template!r}: unknown placeholder {{{field}}}"
    return None


def fill(template: str, values: Mapping[str, object]) -> str:
    """The template with each placeholder replaced by its value."""
    return template.format_map(values)
