"""YAML with line numbers, read within bounds: the reader of every file an operator writes
(the inventory, engine profiles and models, roles), so a mistake names file:line.

`read_yaml(file)` gives plain values with `YamlMapping` for every mapping (its file and
the line of each key); duplicate keys, odd tags, recursive aliases, a file over
MAX_FILE_BYTES and an alias bomb over MAX_YAML_VALUES values are InventoryErrors.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from sparkrack.core.errors import InventoryError

MAX_FILE_BYTES = 1 << 20  # an inventory, profile or model file is a few KiB: 1 MiB is plenty
# values of one file with its aliases expanded (each one counted where it is used): a
# few hundred in a real file; nested aliases of aliases can stand for billions
MAX_YAML_VALUES = 100_000
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlMapping(dict):
    """A YAML mapping that remembers its file and the line of each key."""

    def __init__(self, file: Path):
        super().__init__()
        self.file = file
        self.lines: dict[Hashable, int] = {}


def read_yaml(file: Path) -> Any:
    """The content of a YAML file as plain values, with YamlMapping for every mapping.

    A directory or anything but a regular file where the file belongs is refused, and so
    is a file over MAX_FILE_BYTES (read no further than that) or one that stands for over
    MAX_YAML_VALUES values with its aliases expanded (an "alias bomb", refused before
    anything walks it)."""
    limit = f"{MAX_FILE_BYTES // (1 << 20)} MiB"
    try:
        info = file.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InventoryError(file, None, "a directory where a file belongs",
                                 fix=f"put the {file.name} file there instead")
        if not stat.S_ISREG(info.st_mode):
            raise InventoryError(file, None, "not a regular file",
                                 fix=f"make {file.name} a plain file")
        if info.st_size > MAX_FILE_BYTES:
            raise InventoryError(file, None, f"{info.st_size:,} bytes, over the {limit} "
                                 "limit of an inventory file", fix="is it the right file? "
                                 "inventory and profile files are a few KiB")
        with open(file, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise InventoryError(file, None, f"over the {limit} limit of an inventory file",
                                 fix="is it the right file?")
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(file, None, "not UTF-8 text", fix="save it as UTF-8") from None
    except OSError as error:
        raise InventoryError(file, None, f"cannot read: {error.strerror}",
                             fix="make it a readable file") from None
    try:
        loader = yaml.SafeLoader(text)  # checks for unprintable characters
        try:
            root = loader.get_single_node()
            return None if root is None else _Converter(loader, file).value(root, None)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise InventoryError(file, mark.line + 1 if mark else None,
                             f"YAML syntax error: {error.problem or error.context}",
                             fix="correct the YAML at that line") from None
    except yaml.YAMLError as error:
        raise InventoryError(file, None, f"YAML error: {str(error).splitlines()[0]}",
                             fix="remove control characters from the file") from None
    except RecursionError:
        raise InventoryError(file, None, "YAML nested too deeply",
                             fix="flatten the structure") from None


class _Converter:
    """Turns composed YAML nodes into values, refusing duplicate keys and odd tags."""

    def __init__(self, loader: yaml.SafeLoader, file: Path):
        self.loader = loader
        self.file = file
        self.done: dict[int, Any] = {}  # node id -> value, so aliases convert once
        self.active: set[int] = set()  # nodes being converted, to catch recursive aliases
        self.sizes: dict[int, int] = {}  # collection node id -> its values, aliases expanded

    def value(self, node: yaml.Node, parent_key: Any) -> Any:
        """The value of node; parent_key names what holds it, for messages."""
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.loader.construct_object(node)
            except (ValueError, OverflowError) as error:  # a 5,000-digit integer, 2026-13-45
                what, fix = _unreadable(node, error)
                raise InventoryError(self.file, line_of(node), what, fix=fix) from None
        if id(node) in self.active:
            raise InventoryError(self.file, line_of(node), "recursive YAML alias",
                                 fix="do not nest an anchor inside itself")
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise InventoryError(self.file, line_of(node), f"unsupported YAML tag '{node.tag}'",
                                 fix="use plain mappings and lists")
        if id(node) not in self.done:
            self.active.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                self.done[id(node)] = [self.value(item, parent_key) for item in node.value]
                self._count(node, node.value)
            else:
                self.done[id(node)] = self._mapping(node, parent_key)
                self._count(node, [value for _, value in node.value])
            self.active.discard(id(node))
        return self.done[id(node)]

    def _count(self, node: yaml.Node, children: list[yaml.Node]) -> None:
        """Record how many values node stands for, refusing over MAX_YAML_VALUES."""
        size = 1 + sum(self.sizes.get(id(child), 1) for child in children)
        if size > MAX_YAML_VALUES:
            raise InventoryError(self.file, line_of(node),
                                 f"YAML aliases expand to over {MAX_YAML_VALUES:,} values",
                                 fix="write the values out; do not nest aliases of aliases")
        self.sizes[id(node)] = size

    def _mapping(self, node: yaml.MappingNode, parent_key: Any) -> YamlMapping:
        """A mapping node as a YamlMapping; merge keys (<<) apply, duplicate keys are errors."""
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node)
            if key in first_lines:
                what = "host" if parent_key == "hosts" else "key"
                raise InventoryError(
                    self.file, line_of(key_node),
                    f"duplicate {what} '{key}' (first at line {first_lines[key]})",
                    fix="keep one entry per node" if what == "host" else "keep one of them")
            first_lines[key] = line_of(key_node)
        self.loader.flatten_mapping(node)
        result = YamlMapping(self.file)
        for key_node, value_node in node.value:
            key = self._key(key_node)
            result[key] = self.value(value_node, key)
            result.lines[key] = line_of(key_node)
        return result

    def _key(self, node: yaml.Node) -> Any:
        """A mapping key; only scalars are keys."""
        if not isinstance(node, yaml.ScalarNode):
            raise InventoryError(self.file, line_of(node), "a key must be a plain name",
                                 fix="do not use a list or mapping as a key")
        return self.loader.construct_object(node)


def line_of(node: yaml.Node) -> int:
    """The 1-based line where node starts."""
    return node.start_mark.line + 1


def _unreadable(node: yaml.ScalarNode, error: Exception) -> tuple[str, str]:
    """(what, fix) for a scalar YAML reads as a number or date but Python cannot make."""
    kind = node.tag.rsplit(":", 1)[-1]
    if kind == "int":
        digits = sum(c.isdigit() for c in node.value)
        return (f"an integer of {digits:,} digits, over the {sys.get_int_max_str_digits():,} "
                "Python reads", "write a number of the size the key takes")
    shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    return (f"{shown!r} reads as a {kind} that cannot be ({str(error).splitlines()[0][:80]})",
            "quote it to make it text, or correct it")
