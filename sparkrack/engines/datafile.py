"""Typed reading of the engine and model data files, every mistake an InventoryError at file:line.

The YAML itself is read by the inventory's reader (duplicate keys refused, a line per key);
`Section` wraps one mapping of such a file and hands out checked values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sparkrack.core.errors import InventoryError, allowed_fix, did_you_mean
from sparkrack.inventory import YamlMapping, read_yaml
from sparkrack.inventory.ranges import Range
from sparkrack.inventory.schema import describe
from sparkrack.inventory.values import has_control

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REQUIRED = object()


def read_section(file: Path, allowed: tuple[str, ...] | None, *,
                 docs: str = "docs/formats.md") -> Section:
    """The top-level mapping of a data file, its keys limited to allowed; docs: where its
    keys are described (the fix of a mistake too long to spell out names it)."""
    return Section(read_yaml(file), file, None, "", allowed, docs)


class Section:
    """One mapping of a data file: its keys checked against a list, its values by type."""

    def __init__(self, value: Any, file: Path, line: int | None, label: str,
                 allowed: tuple[str, ...] | None, docs: str = "docs/formats.md"):
        self.file = file
        self.line = line
        self.label = label
        self.docs = docs
        if value is None:
            value = YamlMapping(file)
        if not isinstance(value, YamlMapping):
            raise InventoryError(file, line, f"{label or 'file'}: expected a mapping, got "
                                 f"{describe(value)}", fix="write key: value lines")
        self.mapping = value
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    raise self.error(key, f"unknown key '{key}'{did_you_mean(str(key), allowed)}",
                                     allowed_fix("allowed keys", allowed, docs))

    def __contains__(self, key: str) -> bool:
        return key in self.mapping

    def __iter__(self) -> Iterator[Any]:
        return iter(self.mapping)

    def line_of(self, key: Any) -> int | None:
        """The line of key, else the line of this section."""
        return self.mapping.lines.get(key, self.line)

    def error(self, key: Any, message: str, fix: str) -> InventoryError:
        """An InventoryError at the line of key."""
        return InventoryError(self.file, self.line_of(key), message, fix=fix)

    def raw(self, key: Any) -> Any:
        """The unchecked value of key (None when absent)."""
        return self.mapping.get(key)

    def value(self, key: str, check: Callable[[Any], bool], expected: str, *,
              default: Any = _REQUIRED) -> Any:
        """The value of key if check accepts it; default when absent; InventoryError otherwise."""
        if key not in self.mapping:
            if default is _REQUIRED:
                where = f" in {self.label}" if self.label else ""
                raise InventoryError(self.file, self.line, f"missing key '{key}'{where}",
                                     fix=f"add {key}: <{expected}>")
            return default
        value = self.mapping[key]
        if not check(value):  # a long expectation is not said twice: the line stays short
            raise self.error(key, f"{key}: expected {expected}, got {describe(value)}",
                             fix=f"write {key}: <{expected}>" if len(expected) <= 40 else
                             f"see {self.docs}")
        return value

    def number(self, key: str, found: Range, *, integer: bool = True,
               default: Any = _REQUIRED) -> Any:
        """The number under key within its range (ranges.py): a whole number when integer;
        default when absent; InventoryError at its line naming the range and why otherwise."""
        kind = "a whole number" if integer else "a number"
        value = self.value(key, lambda v: isinstance(v, int if integer else (int, float))
                           and not isinstance(v, bool), f"{kind} in {found.text()}",
                           default=default)
        problem = None if value is default else found.problem(value)
        if problem:
            raise self.error(key, f"{key}: {problem}", fix=f"write {key}: <{kind} in "
                             f"{found.text()}>")
        return value

    def section(self, key: str, allowed: tuple[str, ...] | None = None, *,
                required: bool = True) -> Section:
        """The mapping under key as a Section (empty when absent and not required)."""
        if required and key not in self.mapping:
            raise InventoryError(self.file, self.line, f"missing key '{key}'",
                                 fix=f"add a mapping {key}:")
        return Section(self.mapping.get(key), self.file, self.line_of(key), key, allowed,
                       self.docs)


def is_name(value: Any) -> bool:
    """Whether value is a name: letters, digits, '.', '_' and '-'."""
    return isinstance(value, str) and bool(NAME.fullmatch(value))


def is_text(value: Any) -> bool:
    """Whether value is a non-blank string."""
    return isinstance(value, str) and bool(value.strip())


def is_line(value: Any) -> bool:
    """Whether value is a non-blank string on one line (no control characters)."""
    return is_text(value) and not has_control(value)


def is_word_list(value: Any) -> bool:
    """Whether value is a list of argv words: non-blank strings without control characters."""
    return isinstance(value, list) and all(is_line(item) for item in value)


def is_count(value: Any) -> bool:
    """Whether value is an integer >= 1 (booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_number(value: Any) -> bool:
    """Whether value is an int or float >= 0 (booleans are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def is_text_list(value: Any) -> bool:
    """Whether value is a list of non-blank strings (empty allowed)."""
    return isinstance(value, list) and all(is_text(item) for item in value)


