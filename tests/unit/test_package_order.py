"""The package order: every import of sparkrack's own code goes down, never up or sideways
(functions' own imports too). A layer lists the top-level packages and modules that may
import anything in the layers below it and nothing in its own or above."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import sparkrack

PACKAGE = Path(sparkrack.__file__).parent
LAYERS = (  # the top first
    ("__main__",),  # `python -m sparkrack`
    ("cli",),
    ("validate",),  # every file an operator writes, checked: the inventory to a fleet
    ("onboard", "bench", "watchdog", "export", "status", "rehearsal", "learn"),
    ("racks",),
    ("monitoring",),
    ("lifecycle",),
    ("logs",),
    ("deployments",),
    ("rules",),
    ("engines",),
    ("provision",),
    ("engineenv",),
    ("safety", "transfer", "rails"),
    ("facts", "oplock"),
    ("pdu",),
    ("fleet",),
    ("inventory",),
    ("data",),
    ("core", "remote", "sparkrack"),
)
DEPTH = {part: depth for depth, layer in enumerate(LAYERS) for part in layer}


def part_of(module: str) -> str:
    """The top-level package or module of a dotted sparkrack module name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sparkrack"


def imported(path: Path) -> set[str]:
    """The sparkrack modules path imports, at any depth of the file, relative ones resolved."""
    name = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = name[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "sparkrack"}
        elif isinstance(node, ast.ImportFrom):
            base = (".".join(package[:len(package) - node.level + 1]
                             + ([node.module] if node.module else []))
                    if node.level else node.module or "")
            if base == "sparkrack":
                found |= {f"sparkrack.{a.name}" for a in node.names}
            elif base.startswith("sparkrack."):
                # each name that is a module of that package, else the package itself
                found |= {f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base
                          for a in node.names}
    return found


def is_module(name: str) -> bool:
    """Whether the dotted name is a module or package of sparkrack's source."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def edges() -> dict[tuple[str, str], set[str]]:
    """{(importing part, imported part): the files} over every module of the package."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = part_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for module in imported(path):
            target = part_of(module)
            if target != source:
                found.setdefault((source, target), set()).add(
                    str(path.relative_to(PACKAGE.parent)))
    return found


def test_every_part_of_the_package_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert parts - set(DEPTH) == set()


def test_every_import_goes_down():
    upward = {f"{a} -> {b} ({', '.join(sorted(files))})"
              for (a, b), files in edges().items()
              if DEPTH[a] >= DEPTH[b]}
    assert upward == set()


def test_the_engines_learn_their_environment_without_provisioning():
    """engines/ builds launch specs from the engine environment (engineenv), which
    provisioning writes; neither the engines nor that environment import provisioning."""
    found = edges()
    assert ("engines", "engineenv") in found and ("provision", "engineenv") in found
    assert {(a, b) for a, b in found if b == "provision" and a in ("engines", "engineenv")} \
        == set()


def test_the_check_sees_relative_and_function_level_imports():
    assert ("lifecycle", "engines") in edges()  # `from ..engines import ...`
    assert ("cli", "bench") in edges()  # inside bench_tasks.py's functions only


LENGTH_NORM = 450  # lines: a norm to notice, never a reason to cut (docs/internals.md)


def long_modules(package: Path, norm: int = LENGTH_NORM) -> dict[str, int]:
    """{module path: lines} for each module outside the rehearsal rack over norm lines."""
    return {str(path.relative_to(package)): n for path in sorted(package.rglob("*.py"))
            if "rehearsal" not in path.relative_to(package).parts
            and (n := len(path.read_text().splitlines())) > norm}


def test_a_module_over_the_length_norm_is_a_warning_not_a_failure():
    """Split a module by concept, not by count: one over the norm is named, never failed."""
    for name, lines in long_modules(PACKAGE).items():
        warnings.warn(f"sparkrack/{name}: {lines} lines, over the {LENGTH_NORM}-line norm; "
                      "split it if it holds more than one concept", stacklevel=1)


def test_the_length_norm_finds_long_modules_outside_the_rehearsal_rack(tmp_path):
    (tmp_path / "rehearsal").mkdir()
    (tmp_path / "long.py").write_text("x = 1\n" * 6)
    (tmp_path / "short.py").write_text("x = 1\n" * 5)
    (tmp_path / "rehearsal" / "long.py").write_text("x = 1\n" * 9)
    assert long_modules(tmp_path, norm=5) == {"long.py": 6}


def module_imports() -> dict[str, set[str]]:
    """{module: the sparkrack modules it imports} (`imported`'s names that are modules;
    TYPE_CHECKING-only imports too: a reader follows them as well)."""
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
        ".__init__"): p for p in PACKAGE.rglob("*.py")}
    return {name: (imported(path) & modules.keys()) - {name} for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle():
    """Modules that import each other in a loop: none (a circle drawn once is read twice).
    An import inside a function, or for the type checker only, is one as well. The last
    circles were undone by issue 55: the rehearsal rack and its PDU (the rack's faults out
    of rack.py), the onboard steps and their report (their results in outcomes.py),
    provision's modules and roles (roletasks.py, renderer.py), the stub's API and head (the
    API reads rank 0 through a Protocol)."""
    found = [sorted(c) for c in circles(module_imports())]
    assert found == [], f"import circles: {found}"


def test_a_circle_through_a_function_or_a_type_only_import_is_found(tmp_path, monkeypatch):
    package = tmp_path / "sparkrack"
    (package / "room").mkdir(parents=True)
    sources = {"__init__.py": "", "room/__init__.py": "",
               "room/a.py": "from . import b\n",
               "room/b.py": "def later():\n    from sparkrack.room.a import thing\n",
               "room/c.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                            "    from .d import D\n",
               "room/d.py": "from sparkrack.room import c\n",
               "room/e.py": "from sparkrack.room import a, c\n"}
    for name, text in sources.items():
        (package / name).write_text(text)
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert sorted(sorted(c) for c in circles(module_imports())) == [
        ["sparkrack.room.a", "sparkrack.room.b"], ["sparkrack.room.c", "sparkrack.room.d"]]


def test_a_circle_is_found_through_a_package_import():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert circles(graph) == [frozenset({"a.x", "a.y", "a.z"})]
