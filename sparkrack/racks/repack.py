"""A distribution installed on this machine, packed back into the wheel it was installed
from: the files its RECORD lists (each checked against RECORD's hash), named from its WHEEL
`Tag:` lines, so that `fleet.router.install` sends the router's host the smg this machine
runs without asking a package index (docs/fleet.md#installing-the-router).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# what an installer adds beside the wheel's own files (PEP 376 / the binary distribution
# format: INSTALLER, REQUESTED, direct_url.json; bytecode it compiles; scripts it writes
# from entry_points.txt, outside the package's folder)
INSTALLER_FILES = ("INSTALLER", "REQUESTED", "direct_url.json")
# the glibc of a legacy manylinux tag (PEP 600)
LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class RepackError(Exception):
    """An installed distribution that cannot be packed back (the message says why)."""


@dataclass(frozen=True)
class Host:
    """What a wheel must fit: the host's machine, Python and glibc."""

    machine: str  # platform.machine(): x86_64, aarch64
    python: tuple[int, int]  # (3, 11)
    glibc: tuple[int, int] | None  # None: not a glibc system (no manylinux wheel fits)

    @property
    def version(self) -> str:
        """Its Python as pip's --python-version takes it: 3.11."""
        return ".".join(map(str, self.python))


def installed(name: str, version: str | None = None) -> metadata.Distribution | None:
    """The distribution name as installed beside sparkrack (at version, when given)."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    return dist if version is None or dist.version == version else None


def tags(dist: metadata.Distribution) -> list[str]:
    """The distribution's wheel tags (interpreter-abi-platform), from its WHEEL file."""
    text = dist.read_text("WHEEL") or ""
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Tag:")]


def fits(tag: str, host: Host) -> bool:
    """Whether a wheel tag installs on host (the rules pip applies, for CPython on Linux)."""
    interpreter, abi, platform = tag.split("-")
    if platform != "any":
        arch = platform.removeprefix("linux_")
        found = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
        legacy = re.fullmatch(r"(manylinux\d+)_(\w+)", platform)
        if found:
            needs, arch = (int(found[1]), int(found[2])), found[3]
        elif legacy and legacy[1] in LEGACY_GLIBC:
            needs, arch = LEGACY_GLIBC[legacy[1]], legacy[2]
        elif platform.startswith("linux_"):
            needs = None  # built here, for this machine's own libraries
        else:
            return False
        if arch != host.machine or (needs is not None and
                                    (host.glibc is None or host.glibc < needs)):
            return False
    major, minor = host.python
    if interpreter in ("py3", f"py{major}{minor}") and abi == "none":
        return True
    version = re.fullmatch(r"cp(\d)(\d+)", interpreter)
    if version is None or int(version[1]) != major:
        return False
    if abi == "abi3":
        return int(version[2]) <= minor
    return int(version[2]) == minor and abi in (interpreter, "none")


def wheel_name(dist: metadata.Distribution) -> str:
    """The wheel's file name: its name and version, and its tags compressed (PEP 425)."""
    parts = [tag.split("-") for tag in tags(dist)]
    if not parts:
        raise RepackError(f"{dist.metadata['Name']}: its WHEEL has no Tag line")
    joined = ["." .join(dict.fromkeys(p[i] for p in parts)) for i in range(3)]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    return f"{name}-{dist.version}-{'-'.join(joined)}.whl"


def record(dist: metadata.Distribution) -> list[list[str]]:
    """The RECORD rows of the wheel's own files: (path, hash, size), as installed."""
    text = dist.read_text("RECORD")
    if text is None:
        raise RepackError(f"{dist.metadata['Name']}: installed without a RECORD")
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        path = row[0]
        parts = Path(path).parts
        if (parts[0] == ".." or "__pycache__" in parts or path.endswith(".pyc")
                or (parts[0].endswith(".dist-info") and parts[-1] in INSTALLER_FILES)):
            continue
        rows.append((row + ["", ""])[:3])
    return rows


def repack(dist: metadata.Distribution, folder: Path) -> Path:
    """Pack dist's installed files back into a wheel in folder; RepackError when a file
    differs from its RECORD (changed since it was installed) or is missing."""
    name = wheel_name(dist)
    rows, info = record(dist), None
    out = folder / name
    partial = out.with_name(out.name + ".part")
    with zipfile.ZipFile(partial, "w") as wheel:
        for index, (path, digest, size) in enumerate(rows):
            if path.endswith(".dist-info/RECORD"):
                info = index
                continue
            file = Path(dist.locate_file(path))
            data = file.read_bytes()
            got = _digest(data)
            if digest and (digest != got or (size and int(size) != len(data))):
                partial.unlink()
                raise RepackError(f"{name}: {path} differs from its RECORD (changed since "
                                  "it was installed)")
            rows[index] = [path, got, str(len(data))]
            wheel.writestr(_member(path, file.stat().st_mode), data, compresslevel=1)
        if info is None:
            partial.unlink()
            raise RepackError(f"{name}: its RECORD does not list itself")
        path = rows[info][0]
        rows[info] = [path, "", ""]
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        wheel.writestr(_member(path, 0o644), text.getvalue(), compresslevel=1)
    partial.replace(out)
    return out


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _member(path: str, mode: int) -> zipfile.ZipInfo:
    """A wheel member: deflated, its permission bits as installed (an installer keeps the
    executable bit)."""
    info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100000 | (mode & 0o777)) << 16
    return info
