"""Step 6's second edit: the PDU's outlet map follows a replacement (docs/onboarding.md).

A node that takes another's rank takes its outlet in the inventory's `pdu:` section, as its
power cord takes the old node's place on the strip: the old node's key is renamed in place.
A replacement that is on an outlet of its own already (a spare plugged in beside the rack)
keeps it, and the old node's entry is removed. The edit is textual, as join's is: the key's
characters (and, for a removal, its entry) are located from the YAML node positions and
everything else of the file stays as it was.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkrack.core.errors import UsageError


def section_file(inventory_path: Path) -> Path | None:
    """The group_vars file that sets `pdu:`, or None (no PDU in the inventory)."""
    folder = inventory_path / "group_vars"
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.y*ml")):
        node = yaml.compose(path.read_text(encoding="utf-8"))
        if isinstance(node, yaml.MappingNode) and _value(node, "pdu") is not None:
            return path
    return None


def follow(text: str, old: str, new: str) -> str:
    """text (a group_vars file with `pdu: outlets:`) with old's outlet given to new, or old's
    entry removed when new has an outlet already; text unchanged when old has none."""
    outlets = _value(_value(yaml.compose(text), "pdu"), "outlets")
    if not isinstance(outlets, yaml.MappingNode):
        raise UsageError("pdu: outlets: not a mapping", fix="fix the pdu section by hand")
    keys = {key.value: (key, value) for key, value in outlets.value}
    if old not in keys:
        return text
    key, value = keys[old]
    if new not in keys:
        return text[:key.start_mark.index] + new + text[key.end_mark.index:]
    start, end = key.start_mark.index, value.end_mark.index
    if outlets.flow_style:  # `{a: 1, old: 2, b: 3}`: the entry and one separator
        rest = text[end:]
        stripped = rest.lstrip()
        if stripped.startswith(","):
            end += len(rest) - len(stripped) + 1
            end += len(text[end:]) - len(text[end:].lstrip(" "))
        else:  # the last entry: the separator before it
            start = len(text[:start].rstrip().removesuffix(","))
    else:  # a block mapping: the entry's whole line
        start = text.rfind("\n", 0, start) + 1
        end = text.find("\n", end) + 1 or len(text)
    return text[:start] + text[end:]


def _value(mapping: yaml.Node | None, name: str) -> yaml.Node | None:
    if not isinstance(mapping, yaml.MappingNode):
        return None
    return next((value for key, value in mapping.value if key.value == name), None)
