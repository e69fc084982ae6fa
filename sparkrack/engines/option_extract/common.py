"""What both engines' readers use: an option as read, the package's sources (a wheel or an
installed folder), small AST helpers, and argparse's actions as the sources define them."""

from __future__ import annotations

import ast
import hashlib
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

NONE, VALUE, OPTIONAL = "none", "value", "optional"
NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


@dataclass
class Option:
    """One argparse argument: its option strings (first = primary) and what it takes."""

    names: list[str]
    takes: str
    negatives: list[str] = field(default_factory=list)  # BooleanOptionalAction's extra forms
    source: str = ""


class Sources:
    """The .py files of an engine package, parsed on demand: from a sources (a zip) or from
    the folder a Python installed it in (`root` holds the package folder)."""

    def __init__(self, path: Path, root: Path | None = None, package: str = ""):
        self.path = path
        self.problems: list[str] = []
        self._trees: dict[str, ast.Module] = {}
        if root is None:
            self.zip: zipfile.ZipFile | None = zipfile.ZipFile(path)
            self.names = set(self.zip.namelist())
            self.root = None
        else:
            self.zip, self.root = None, root
            self.names = {str(file.relative_to(root)).replace(os.sep, "/")
                          for file in sorted((root / package).rglob("*.py"))}

    def read(self, member: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(member)
        return (self.root / member).read_bytes()

    def tree(self, member: str) -> ast.Module:
        if member not in self._trees:
            tree = ast.parse(self.read(member).decode("utf-8"), member)
            parts = member[:-3].split("/")
            tree.package = ".".join(parts[:-1])  # for relative imports
            tree.member = member
            self._trees[member] = tree
        return self._trees[member]

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self.names:
                return candidate
        return None

    def origin(self) -> str:
        """Where the sources were read, for the table's header."""
        if self.zip is not None:
            digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
            return f"{self.path.name}\n# (sha256 {digest}),"
        return f"the package installed at {self.path}"


# --- Small AST helpers ------------------------------------------------------------------


def strings(nodes) -> list[str]:
    """The string constants among nodes, in order."""
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def const(node: ast.expr | None):
    return node.value if isinstance(node, ast.Constant) else None


def dotted(node: ast.expr) -> str:
    """`a.b.c` of a Name/Attribute chain, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def find_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name),
                None)


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name),
                None)


def imports(tree: ast.Module) -> dict[str, str]:
    """name -> 'module.Name' for every `from module import Name [as name]` (relative ones
    resolved against the module's own package, see Sources.tree)."""
    found = {}
    package = getattr(tree, "package", "").split(".")
    for node in ast.walk(tree):  # TYPE_CHECKING imports included
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[:len(package) - node.level + 1] if node.level > 1 else package
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        for alias in node.names:
            if alias.name == "*":
                found.setdefault("*", []).append(module)  # type: ignore[arg-type]
            else:
                found[alias.asname or alias.name] = f"{module}.{alias.name}"
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = alias.name
    return found


def add_argument_calls(function: ast.FunctionDef) -> list[ast.Call]:
    """Every `<x>.add_argument(...)` call in function, in source order."""
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def option_strings(call: ast.Call) -> list[str]:
    return [s for s in strings(call.args) if s.startswith("-")]


def kebab(name: str) -> str:
    return "--" + name.replace("_", "-")


def with_negatives(option: Option, action: ast.expr | None, enable_disable: bool) -> Option:
    """option with the extra forms a BooleanOptionalAction registers."""
    if action is None or dotted(action).rsplit(".", 1)[-1] != "BooleanOptionalAction":
        return option
    option.takes = NONE
    for name in option.names:
        if name.startswith("--"):
            option.negatives.append("--no-" + name[2:])
            if enable_disable:
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if name.startswith(prefix):
                        option.negatives.append(inverse + name[len(prefix):])
    return option


class ActionReader:
    """What a custom argparse Action class takes, from its __init__'s nargs default."""

    def __init__(self, sources: Sources):
        self.sources = sources

    def takes(self, action: ast.expr, where: ast.Module, extra: dict | None = None) -> str:
        text = const(action) if isinstance(action, ast.Constant) else dotted(action)
        nargs = (extra or {}).get("nargs")
        if nargs in ("?", "*"):
            return OPTIONAL
        if text in NO_VALUE_ACTIONS:
            return NONE
        if text in ("append", "store", "extend"):
            return VALUE
        name = text.rsplit(".", 1)[-1]
        if name == "BooleanOptionalAction":
            return NONE
        target = imports(where).get(name)
        tree = where
        if target:
            member = self.sources.module_file(target.rsplit(".", 1)[0])
            tree = self.sources.tree(member) if member else where
        cls = find_class(tree, name)
        if cls is None:
            self.sources.problems.append(f"action {text}: class not found, taken as taking a "
                                       "value")
            return VALUE
        init = find_method(cls, "__init__")
        if init is None:
            return VALUE  # argparse.Action's nargs default: one value
        args = init.args
        defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults, strict=False)) \
            if args.defaults else {}
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d})
        value = const(defaults.get("nargs"))
        if value == 0:
            return NONE
        return OPTIONAL if value in ("?", "*") else VALUE
