"""The model manifest, `{model_path}/sparkrack-manifest.sha256` (pure): reading it, comparing
nodes' manifests (docs/formats.md#the-model-manifest).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

MANIFEST_NAME = "sparkrack-manifest.sha256"
STAGE_CACHE = "/var/lib/sparkrack/stage-verified.json"  # the nodes' hash cache
_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")


class ManifestError(ValueError):
    """A manifest line that is not `SHA256  relative/path`."""


def parse_manifest(text: str) -> dict[str, str]:
    """{relative path: sha256} of a `sha256sum` manifest; ManifestError for a bad line or a
    path that leaves the model directory."""
    files: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line.rstrip("\r"))
        if not match:
            raise ManifestError(f"line {number}: not `SHA256  PATH`: {line[:80]!r}")
        digest, name = match.group(1).lower(), match.group(2)
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise ManifestError(f"line {number}: {name!r} leaves the model directory")
        name = str(path)
        if name in (".", MANIFEST_NAME) or path.name.endswith(".sparkrack-partial"):
            raise ManifestError(f"line {number}: {name!r} cannot be a model file")
        if name in files and files[name] != digest:
            raise ManifestError(f"line {number}: {name} listed twice with different hashes")
        files[name] = digest
    if not files:
        raise ManifestError("no file listed")
    return files


def digest(text: str) -> str:
    """The manifest's own SHA-256 (of its bytes as a node holds them)."""
    return hashlib.sha256(text.encode()).hexdigest()


def rack_manifest(texts: Mapping[str, str | None]) -> tuple[str | None, list[str], list[str]]:
    """(the majority's manifest text, the members holding it, members that differ or have
    none) from {member: manifest text or None}."""
    counts: dict[str, list[str]] = {}
    for node, text in texts.items():
        if text:
            counts.setdefault(text, []).append(node)
    if not counts:
        return None, [], list(texts)
    text, holders = max(counts.items(), key=lambda item: len(item[1]))
    return text, holders, [n for n in texts if n not in holders]


def size_text(count: int) -> str:
    """Bytes as people read them: 812 B, 130.4 KiB, 61.6 MiB, 3.00 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}" if unit == "GiB" else f"{count / scale:.1f} {unit}"
    return f"{count} B"
