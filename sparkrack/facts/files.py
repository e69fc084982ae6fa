"""A file on a node as a round trip sees it: stat, its content when small (else its
sha256), its entries when a directory. FILE is the kind (gather.py's `file_section` answers,
`parse_file` reads); `file_query` asks it."""

from __future__ import annotations

import base64
import hashlib
import shlex
from dataclasses import dataclass, field
from typing import Any

from sparkrack.facts.queries import Fact, Query
from sparkrack.remote.gather import file_section

CONTENT_LIMIT = 65536  # files up to this size come back whole (for diffs and hashes)


def file_query(path: str, limit: int = CONTENT_LIMIT) -> Query:
    """stat of path, its content when a regular file of at most limit bytes (else its
    sha256), its entries when a directory."""
    return FILE.query(path, limit, value=(path,))


@dataclass(frozen=True)
class FileFacts:
    """What stat (and a read, for small files) says about one path."""

    exists: bool = False
    type: str = ""  # file | directory | link | other
    mode: str = ""  # octal without leading zeros, as stat %a prints it ("644")
    owner: str = ""
    group: str = ""
    size: int = 0
    mtime: str = ""  # seconds.nanoseconds, exactly as stat printed it
    sha256: str | None = None
    content: bytes | None = field(default=None, repr=False)
    entries: tuple[str, ...] = ()  # a directory's entry names


def parse_file(lines: list[str]) -> FileFacts:
    """One `file_section`'s lines."""
    values: dict[str, Any] = {}
    entries: list[str] = []
    for line in lines:
        key, _, rest = line.partition(" ")
        if key == "missing":
            return FileFacts()
        if key == "entry":
            entries.append(_unquote(rest))
        elif key in ("stat", "content", "sha256"):
            values[key] = rest
    if "stat" not in values:
        return FileFacts()
    kind, mode, owner, group, size, mtime = (values["stat"].split("|") + [""] * 6)[:6]
    content = base64.b64decode(values["content"]) if "content" in values else None
    digest = hashlib.sha256(content).hexdigest() if content is not None else values.get("sha256")
    return FileFacts(
        exists=True, type=_file_type(kind), mode=mode, owner=owner, group=group,
        size=int(size) if size.isdigit() else 0, mtime=mtime, sha256=digest, content=content,
        entries=tuple(entries))


FILE = Fact(file_section, parse_file)


def _unquote(text: str) -> str:
    """A name printed by bash's printf %q, as it is (one line whatever the name holds)."""
    if text.startswith("$'") and text.endswith("'"):
        try:
            return text[2:-1].encode("utf-8").decode("unicode_escape").encode(
                "latin-1").decode("utf-8", errors="surrogateescape")
        except (UnicodeError, ValueError):
            return text
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


def _file_type(stat_type: str) -> str:
    if stat_type in ("regular file", "regular empty file"):
        return "file"
    if stat_type == "directory":
        return "directory"
    if stat_type == "symbolic link":
        return "link"
    return "other"
