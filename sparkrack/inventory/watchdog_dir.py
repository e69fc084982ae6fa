"""Where the watchdog may be installed on its node: a directory of its own that sparkrack
made, never a system directory; the path's check here, the node's in the probe, the
removal's in remove.sh (docs/security.md#the-watchdogs-install-directory-is-one-sparkrack-made).
"""

from __future__ import annotations

import posixpath

MARKER_FILE = ".sparkrack-watchdog"  # remote/watchdog.py and remote/remove.sh name it too
MARKER_TEXT = ("This directory was made by sparkrack (`invoke watch.install`): the watchdog "
               "service.\n`invoke watch.uninstall` removes it whole.\n")
# directory kinds the probe reports (remote/watchdog.py install_dir_kind)
OURS = ("absent", "empty", "marked", "legacy")  # legacy: our lib/ manifest, no marker yet
KIND_WORDS = {"link": "a symbolic link", "file": "not a directory",
              "foreign": f"a directory holding other files and no {MARKER_FILE}"}
# never the install directory, nor anything under them
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
                "/proc", "/root", "/run", "/sbin", "/snap", "/sys")
# never these, nor their direct subdirectories (/usr/lib, /var/lib, /usr/local, ...)
SYSTEM_ROOTS = ("/usr", "/var")
FIX = "give a directory of its own, absent or empty, e.g. /opt/sparkrack-watchdog"


def plain_path_problem(value: str) -> str | None:
    """What makes value no plain absolute path (it goes into rm -rf and a unit), or None."""
    if (not value.startswith("/") or posixpath.normpath(value) != value or value == "/"
            or any(c.isspace() or c in "\"'\\$%;" for c in value)):
        return "not a plain absolute path"
    return None


def install_dir_problem(path: str) -> str | None:
    """Why path cannot be the watchdog's install directory, or None."""
    plain = plain_path_problem(path)
    if plain:
        return plain
    parts = path.strip("/").split("/")
    if len(parts) == 1:
        return "a top-level directory of the node"
    top = "/" + parts[0]
    if top in SYSTEM_TREES:
        return f"a system directory (under {top})"
    if top in SYSTEM_ROOTS and len(parts) == 2:
        return "a system directory"
    return None


def kind_problem(path: str, kind: str) -> str | None:
    """Why the node's directory of that kind (the probe's) is not the watchdog's, or None."""
    if kind in OURS:
        return None
    return (f"{path} is {KIND_WORDS.get(kind, kind)}: not a directory watch.install made, "
            "and nothing is written into or removed from it")
