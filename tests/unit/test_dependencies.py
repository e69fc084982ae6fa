"""pyproject.toml declares what sparkrack imports: every third-party module a sparkrack file
imports comes from a distribution named in [project].dependencies (the rehearsal's
simulator scripts, which run as top-level modules, are not ones), and the installed
versions satisfy the declared lower bounds."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def third_party_imports() -> dict[str, set[str]]:
    """{top-level module: the sparkrack files importing it}."""
    found: dict[str, set[str]] = {}
    simulators = {file.stem for file in (REPO / "sparkrack/rehearsal/sim").glob("*.py")}
    for file in sorted((REPO / "sparkrack").rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "sparkrack" or top in simulators:
                    continue
                found.setdefault(top, set()).add(str(file.relative_to(REPO)))
    return found


def test_every_imported_distribution_is_declared():
    providers = metadata.packages_distributions()
    wanted = declared()
    missing = {}
    for module, files in third_party_imports().items():
        names = {canonicalize_name(d) for d in providers.get(module, [module])}
        if not names & wanted.keys():
            missing[module] = sorted(files)
    assert not missing, f"imported but not in pyproject's dependencies: {missing}"


def test_the_installed_versions_meet_the_declared_bounds():
    for name, requirement in declared().items():
        assert requirement.specifier.contains(metadata.version(name), prereleases=True), (
            f"{name} {metadata.version(name)} installed, pyproject wants {requirement}")
