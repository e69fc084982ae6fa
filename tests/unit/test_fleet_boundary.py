"""The fleet package is the only place that talks SSH: no other module of sparkrack
imports paramiko or fabric."""

from __future__ import annotations

import ast
from pathlib import Path

import sparkrack

PACKAGE = Path(sparkrack.__file__).parent
SSH_LIBRARIES = {"paramiko", "fabric"}


def imported_roots(path: Path) -> set[str]:
    """The top-level names of every module path imports (at any depth of the file)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_the_fleet_package_imports_ssh_libraries():
    offenders = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if "fleet" not in path.relative_to(PACKAGE).parts[:1]
        and imported_roots(path) & SSH_LIBRARIES)
    assert offenders == []


def test_the_check_sees_an_import():
    assert imported_roots(PACKAGE / "fleet" / "ssh.py") & SSH_LIBRARIES
