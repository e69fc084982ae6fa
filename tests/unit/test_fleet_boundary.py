"""The fleet package is the only place that talks to nodes: no other module of sparkrack
imports paramiko or fabric, and none but the fleet (and the rehearsal rack's own tools)
speaks to a dockerd: the docker SDK's data types (docker.types) are all they may import."""

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


# the docker SDK: its data types build a container's options (engines, nodelimits); the
# watchdog's entry point imports it to fail early when its lib/ lacks it
DOCKER_TYPES_ONLY = {"docker.types"}
WATCHDOG_CHECK = "watchdog/__main__.py"


def docker_imports(path: Path) -> set[str]:
    """The docker modules path imports (any depth of the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "docker")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "docker":
            found.add(node.module)
    return found


def outside_the_fleet() -> list[Path]:
    return [path for path in PACKAGE.rglob("*.py")
            if path.relative_to(PACKAGE).parts[0] not in ("fleet", "rehearsal")]


def test_only_the_fleet_speaks_to_a_dockerd():
    offenders = sorted(
        f"{path.relative_to(PACKAGE)}: {', '.join(sorted(imports - DOCKER_TYPES_ONLY))}"
        for path in outside_the_fleet()
        for imports in [docker_imports(path)]
        if imports - DOCKER_TYPES_ONLY and str(path.relative_to(PACKAGE)) != WATCHDOG_CHECK)
    assert offenders == []
    callers = sorted(str(path.relative_to(PACKAGE)) for path in outside_the_fleet()
                     if ".docker_client(" in path.read_text())
    assert callers == []


def test_the_docker_check_sees_an_import():
    assert docker_imports(PACKAGE / "fleet" / "containers.py") == {"docker.errors"}
