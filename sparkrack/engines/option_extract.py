#!/usr/bin/env python3
"""Every option string an engine's command line accepts, read from its wheel or, inside its
image, from the installed package: the one extractor of the option tables.

    python -m sparkrack.engines.option_extract WHEEL          # tools/engine_options.py too
    python3 option_extract.py --installed sglang              # in the image (engines.learn)

`invoke engines.learn` copies this file into a container of the engine's image on the head
node and runs it there with the image's own Python, without a network and without a GPU:
it reads the sources of the package the image has installed (found with
importlib.util.find_spec, nothing imported) and the version from its installed metadata.
Stdlib only, Python 3.9 or later, so that it runs under whatever Python an image ships.

Nothing from the engine is imported or run (the engines need torch and a GPU): the argparse
definitions are read statically with `ast`, following the code that builds each parser.

- SGLang (`python3 -m sglang.launch_server` = `prepare_server_args`): the input namespaces
  listed in `sglang/srt/server_args.py` (`_INPUT_NAMESPACES`), each a class of
  `sglang/srt/arg_groups/fields/*.py` whose `A[T, help]` / `A[T, Arg(...)]` fields become
  `--kebab-name` (or `Arg(cli_name=...)`, plus `aliases`; `no_cli` fields have none), as
  `arg_groups/arg_utils.add_cli_args_from_dataclass` does; then the `parser.add_argument`
  calls of `ServerArgs.add_cli_args`.
- vLLM (`vllm serve`): `make_arg_parser` of `vllm/entrypoints/common/cli_args.py` (its own
  `add_argument` calls, then every field of `FrontendArgs` and its bases as
  `--kebab-name`), then the `add_argument` calls of `EngineArgs.add_cli_args` and
  `AsyncEngineArgs.add_cli_args` in `vllm/engine/arg_utils.py`, whose `**kwargs["field"]`
  come from `get_kwargs(ConfigClass)`: a field whose type admits bool becomes a
  BooleanOptionalAction, which vLLM's parser registers as EnableDisableAction
  (`--x`, `--no-x`, and for `--enable-x`/`--disable-x` the other one too).

Checked when the lists were first made (sglang 0.5.22, vllm 0.33.0): the same options,
each taking the same kind of value, as the parsers the engines' own code builds when
imported with their third-party dependencies (torch, ...) faked (SGLang: the namespace
fields through `add_cli_args_from_dataclass`, 536 option strings; vLLM: the whole
`vllm serve` parser, 483).

Output, one option string a line: `OPTION TAKES [PRIMARY]`, TAKES being `value`, `none`
(a switch) or `optional` (nargs ? or *), PRIMARY the first option string of the same
argument when OPTION is another name for it (an alias or a short option). Negative forms
(`--no-x`, `--disable-x`) are listed as their own switches. argparse's own -h/--help are
left out. Header lines `#: key value` say what the parser does with unknown spellings.
Anything the reader could not follow is reported on stderr and makes the exit code 1.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import sys
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
        defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults)) \
            if args.defaults else {}
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d})
        value = const(defaults.get("nargs"))
        if value == 0:
            return NONE
        return OPTIONAL if value in ("?", "*") else VALUE


# --- SGLang -----------------------------------------------------------------------------


SGLANG_SERVER_ARGS = "sglang/srt/server_args.py"
SGLANG_FIELDS = "sglang/srt/arg_groups/fields/"


def sglang_options(sources: Sources) -> list[Option]:
    server = sources.tree(SGLANG_SERVER_ARGS)
    namespaces = next(
        (n.value for n in server.body if isinstance(n, ast.Assign)
         and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in n.targets)),
        None)
    if not isinstance(namespaces, ast.List):
        raise SystemExit(f"{SGLANG_SERVER_ARGS}: no _INPUT_NAMESPACES list")
    classes = {}
    for member in sorted(n for n in sources.names if n.startswith(SGLANG_FIELDS)
                         and n.endswith(".py")):
        tree = sources.tree(member)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (node, tree, member)
    actions = ActionReader(sources)
    options: list[Option] = []
    for element in namespaces.elts:
        name = dotted(element)
        if name not in classes:
            raise SystemExit(f"namespace class {name} not found in {SGLANG_FIELDS}")
        options += sglang_fields(name, classes, actions, sources)
    cls = find_class(server, "ServerArgs")
    method = find_method(cls, "add_cli_args") if cls else None
    if method is None:
        raise SystemExit(f"{SGLANG_SERVER_ARGS}: no ServerArgs.add_cli_args")
    for call in add_argument_calls(method):
        names = option_strings(call)
        if not names:
            sources.problems.append(f"{SGLANG_SERVER_ARGS}:{call.lineno}: add_argument "
                                  "without literal option strings")
            continue
        action = keyword(call, "action")
        nargs = const(keyword(call, "nargs"))
        takes = actions.takes(action, server, {"nargs": nargs}) if action is not None \
            else OPTIONAL if nargs in ("?", "*") else VALUE
        options.append(_with_negatives(Option(names, takes, source=f"{SGLANG_SERVER_ARGS}:"
                                              f"{call.lineno}"), action, enable_disable=False))
    return options


def sglang_fields(name: str, classes: dict, actions: ActionReader,
                  sources: Sources) -> list[Option]:
    """The CLI options of one namespace class (its bases' first, as msgspec orders fields)."""
    cls, tree, member = classes[name]
    options = []
    for base in cls.bases:
        if dotted(base) in classes:
            options += sglang_fields(dotted(base), classes, actions, sources)
    module_args = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                   for t in n.targets if isinstance(t, ast.Name)}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = node.annotation
        if not (isinstance(annotation, ast.Subscript)
                and dotted(annotation.value) in ("A", "Annotated", "typing.Annotated")):
            continue  # not Annotated: no CLI argument (arg_utils skips it)
        parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) \
            else [annotation.slice]
        arg = None
        for meta in parts[1:]:
            if isinstance(meta, ast.Name) and isinstance(module_args.get(meta.id), ast.Call):
                meta = module_args[meta.id]
            if isinstance(meta, ast.Call):
                if dotted(meta.func) in ("Arg", "arg_utils.Arg"):
                    arg = meta
                    break
                continue  # NS(...), Derived(...): not CLI metadata
            arg = ast.Call(func=ast.Name("Arg"), args=[], keywords=[])  # a bare help string
            break
        if arg is None or const(keyword(arg, "no_cli")) is True:
            continue
        field_name = node.target.id
        cli_name = const(keyword(arg, "cli_name")) or kebab(field_name)
        aliases = keyword(arg, "aliases")
        names = [cli_name] + (strings(aliases.elts) if isinstance(aliases, ast.List) else [])
        where = f"{member}:{node.lineno}"
        action = keyword(arg, "action")
        nargs = const(keyword(arg, "nargs"))
        extra = {}
        action_kwargs = keyword(arg, "action_kwargs")
        if isinstance(action_kwargs, ast.Dict):
            extra = {const(k): const(v) for k, v in zip(action_kwargs.keys, action_kwargs.values)}
        if action is not None:
            takes = actions.takes(action, tree, {"nargs": nargs or extra.get("nargs")})
            options.append(_with_negatives(Option(names, takes, source=where), action,
                                           enable_disable=False))
            continue
        inner = _sglang_inner_type(parts[0])
        if inner == "bool":
            takes = NONE
        elif nargs in ("?", "*"):
            takes = OPTIONAL
        else:
            takes = VALUE
        options.append(Option(names, takes, source=where))
    return options


def _sglang_inner_type(node: ast.expr) -> str:
    """'bool' when the annotation is bool or Optional[bool] (arg_utils makes store_true)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Optional", "typing.Optional"):
        return _sglang_inner_type(node.slice)
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Union", "typing.Union"):
        parts = [p for p in node.slice.elts if not _is_none(p)] \
            if isinstance(node.slice, ast.Tuple) else [node.slice]
        return _sglang_inner_type(parts[0]) if len(parts) == 1 else "union"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if not _is_none(p)]
        return _sglang_inner_type(parts[0]) if len(parts) == 1 else "union"
    return dotted(node) or type(node).__name__


def _is_none(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or dotted(node) == "None"


def _with_negatives(option: Option, action: ast.expr | None, enable_disable: bool) -> Option:
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


# --- vLLM -------------------------------------------------------------------------------


VLLM_ARG_UTILS = "vllm/engine/arg_utils.py"
VLLM_CLI_ARGS = "vllm/entrypoints/common/cli_args.py"
BOOL_OPTIONAL = ast.Attribute(value=ast.Name("argparse"), attr="BooleanOptionalAction")


class VllmTypes:
    """Classifies config dataclass fields as vLLM's get_kwargs does, from their annotations."""

    def __init__(self, sources: Sources):
        self.sources = sources
        self.class_index: dict[str, list[str]] = {}
        for member in sources.names:
            if member.startswith("vllm/") and member.endswith(".py"):
                text = sources.read(member).decode("utf-8", "replace")
                for found in re.finditer(r"^class (\w+)", text, re.M):
                    self.class_index.setdefault(found.group(1), []).append(member)

    def locate(self, name: str, tree: ast.Module) -> tuple[ast.AST | None, ast.Module | None]:
        """The class or module-level assignment called name, seen from tree."""
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node, tree
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value, tree
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id == name and node.value is not None:
                return node.value, tree
            if type(node).__name__ == "TypeAlias" and node.name.id == name:  # 3.12+
                return node.value, tree
        target = imports(tree).get(name)
        if target:
            module, _, real = target.rpartition(".")
            member = self.sources.module_file(module)
            if member:
                return self.locate(real, self.sources.tree(member))
        for module in imports(tree).get("*", []):
            member = self.sources.module_file(module)
            if member:
                found, where = self.locate(name, self.sources.tree(member))
                if found is not None:
                    return found, where
        for member in self.class_index.get(name, []):
            other = self.sources.tree(member)
            cls = find_class(other, name)
            if cls is not None:
                return cls, other
        return None, None

    def fields(self, name: str, tree: ast.Module) -> list[tuple[str, ast.expr, ast.Module]]:
        """(field, annotation, module) of a dataclass and its bases, bases first."""
        cls, where = self.locate(name, tree)
        if not isinstance(cls, ast.ClassDef):
            raise SystemExit(f"config class {name} not found")
        found: list[tuple[str, ast.expr, ast.Module]] = []
        for base in cls.bases:
            base_name = dotted(base)
            if base_name and base_name not in ("object", "Generic") and \
                    isinstance(self.locate(base_name, where)[0], ast.ClassDef):
                found += self.fields(base_name, where)
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    dotted(node.annotation) != "ClassVar" and not (
                    isinstance(node.annotation, ast.Subscript)
                    and dotted(node.annotation.value) in ("ClassVar", "typing.ClassVar")):
                found = [f for f in found if f[0] != node.target.id]
                found.append((node.target.id, node.annotation, where))
        return found

    def atoms(self, node: ast.expr, tree: ast.Module, depth: int = 0) -> set[str]:
        """The union members of an annotation: 'bool', 'str', 'None', 'dataclass', ...;
        type aliases followed."""
        if depth > 8:
            return {"?"}
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"None"}
            if isinstance(node.value, str):
                return self.atoms(ast.parse(node.value, mode="eval").body, tree, depth + 1)
            return {"?"}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.atoms(node.left, tree, depth) | self.atoms(node.right, tree, depth)
        if isinstance(node, ast.Subscript):
            head = dotted(node.value).rsplit(".", 1)[-1]
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head in ("Optional",):
                return self.atoms(parts[0], tree, depth) | {"None"}
            if head == "Union":
                return set().union(*(self.atoms(p, tree, depth) for p in parts))
            if head == "Annotated":
                return self.atoms(parts[0], tree, depth)
            return {head}  # Literal, list, dict, tuple, ...
        name = dotted(node)
        if not name:
            return {"?"}
        short = name.rsplit(".", 1)[-1]
        if short in ("bool", "str", "int", "float", "None", "dict", "list", "tuple", "set",
                     "Any", "Callable", "Path"):
            return {short}
        root = imports(tree).get(name.split(".")[0], "")
        if "." in name and root and not root.startswith("vllm"):
            return {f"external:{name}"}  # torch.dtype and the like: not bool
        target, where = self.locate(short, tree)
        if isinstance(target, ast.ClassDef):
            return {"dataclass"} if self._is_dataclass(target) else {f"class:{short}"}
        if target is not None:
            return self.atoms(target, where, depth + 1)
        self.sources.problems.append(f"type {name}: not found, taken as not a bool")
        return {f"unknown:{short}"}

    @staticmethod
    def _is_dataclass(cls: ast.ClassDef) -> bool:
        return any(dotted(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1]
                   in ("dataclass", "config") for d in cls.decorator_list)

    def takes(self, annotation: ast.expr, tree: ast.Module) -> tuple[str, bool]:
        """(TAKES, whether it is a BooleanOptionalAction) as _compute_kwargs decides."""
        atoms = self.atoms(annotation, tree)
        if "dataclass" in atoms:
            return VALUE, False
        if atoms == {"bool", "str", "None"}:
            return OPTIONAL, False
        if "bool" in atoms:
            return NONE, True
        return VALUE, False


def vllm_options(sources: Sources) -> list[Option]:
    types = VllmTypes(sources)
    actions = ActionReader(sources)
    cli = sources.tree(VLLM_CLI_ARGS)
    options: list[Option] = []
    make = find_function(cli, "make_arg_parser")
    if make is None:
        raise SystemExit(f"{VLLM_CLI_ARGS}: no make_arg_parser")
    for call in add_argument_calls(make):
        options += _vllm_call(call, {}, {}, types, actions, cli, VLLM_CLI_ARGS)
    frontend = find_class(cli, "FrontendArgs")
    overrides = _kwargs_overrides(cli, ("_customize_cli_kwargs",))
    for name, annotation, where in types.fields("FrontendArgs", cli) if frontend else []:
        takes, boolean = types.takes(annotation, where)
        override = overrides.get(name, {})
        if "action" in override:
            takes = actions.takes(override["action"], cli, {"nargs": None})
            boolean = False
        option = Option([kebab(name)], takes, source=f"{VLLM_CLI_ARGS}:FrontendArgs.{name}")
        options.append(_with_negatives(option, BOOL_OPTIONAL if boolean else None, True))
    arg_utils = sources.tree(VLLM_ARG_UTILS)
    for class_name in ("EngineArgs", "AsyncEngineArgs"):
        cls = find_class(arg_utils, class_name)
        method = find_method(cls, "add_cli_args") if cls else None
        if method is None:
            raise SystemExit(f"{VLLM_ARG_UTILS}: no {class_name}.add_cli_args")
        sources: dict[str, str] = {}  # X = get_kwargs(Config): X -> Config
        fields_of: dict[str, tuple[str, str]] = {}  # Y = X["field"]: Y -> (Config, field)
        for node in sorted((n for n in ast.walk(method) if isinstance(n, ast.Assign)),
                           key=lambda n: n.lineno):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            value = node.value
            if isinstance(value, ast.Call) and dotted(value.func) == "get_kwargs" and value.args:
                sources.update(dict.fromkeys(targets, dotted(value.args[0])))
            picked = _field_ref(value, sources)
            if picked:
                fields_of.update(dict.fromkeys(targets, picked))
        for call in add_argument_calls(method):
            options += _vllm_call(call, sources, fields_of, types, actions, arg_utils,
                                  VLLM_ARG_UTILS)
    return options


def _field_ref(node: ast.expr, sources: dict[str, str]) -> tuple[str, str] | None:
    """(Config, field) of `X["field"]` with X = get_kwargs(Config), of
    `get_kwargs(Config)["field"]`, or of `{**X["field"], ...}`; else None."""
    if isinstance(node, ast.Dict):
        spread = [v for k, v in zip(node.keys, node.values) if k is None]
        return _field_ref(spread[0], sources) if spread else None
    if not (isinstance(node, ast.Subscript) and isinstance(const(node.slice), str)):
        return None
    holder = node.value
    if isinstance(holder, ast.Name) and holder.id in sources:
        return sources[holder.id], const(node.slice)
    if isinstance(holder, ast.Call) and dotted(holder.func) == "get_kwargs" and holder.args:
        return dotted(holder.args[0]), const(node.slice)
    return None


def _kwargs_overrides(tree: ast.Module, methods: tuple[str, ...]) -> dict[str, dict]:
    """`kwargs["field"]["action"] = X` assignments in the named methods of every class."""
    found: dict[str, dict] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in methods:
            function = find_method(cls, method)
            for node in ast.walk(function) if function else ():
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.value,
                                                                        ast.Subscript):
                        key, field_name = const(target.slice), const(target.value.slice)
                        if isinstance(key, str) and isinstance(field_name, str):
                            found.setdefault(field_name, {})[key] = node.value
    return found


def _vllm_call(call: ast.Call, sources: dict[str, str], fields_of: dict[str, tuple[str, str]],
               types: VllmTypes, actions: ActionReader, tree: ast.Module,
               member: str) -> list[Option]:
    names = option_strings(call)
    if not names:
        if not strings(call.args):
            types.sources.problems.append(f"{member}:{call.lineno}: add_argument without "
                                        "literal option strings")
        return []  # a positional (model_tag)
    where = f"{member}:{call.lineno}"
    action = keyword(call, "action")
    nargs = const(keyword(call, "nargs"))
    if action is not None:
        takes = actions.takes(action, tree, {"nargs": nargs})
        return [_with_negatives(Option(names, takes, source=where), action, True)]
    spread = [k.value for k in call.keywords if k.arg is None]
    if spread:
        ref = spread[0]
        picked = fields_of.get(ref.id) if isinstance(ref, ast.Name) else _field_ref(ref, sources)
        if picked is None:
            types.sources.problems.append(f"{where}: **{ast.unparse(ref)} not followed")
            return [Option(names, VALUE, source=where)]
        config, field_name = picked
        found = [(a, w) for n, a, w in types.fields(config, tree) if n == field_name]
        if not found:
            types.sources.problems.append(f"{where}: {config}.{field_name} not found")
            return [Option(names, VALUE, source=where)]
        annotation, holder = found[0]
        takes, boolean = types.takes(annotation, holder)
        if nargs in ("?", "*"):
            takes = OPTIONAL
        return [_with_negatives(Option(names, takes, source=f"{where} {config}.{field_name}"),
                                BOOL_OPTIONAL if boolean else None, True)]
    return [Option(names, OPTIONAL if nargs in ("?", "*") else VALUE, source=where)]


# --- Output -----------------------------------------------------------------------------


ENGINES = {
    "sglang": {"reader": sglang_options, "abbrev": True, "underscores": False,
               "what": "`python3 -m sglang.launch_server` (prepare_server_args)",
               "files": f"{SGLANG_SERVER_ARGS}, {SGLANG_FIELDS}*.py"},
    "vllm": {"reader": vllm_options, "abbrev": True, "underscores": True,
             "what": "`vllm serve` (make_arg_parser)",
             "files": f"{VLLM_CLI_ARGS}, {VLLM_ARG_UTILS} and the config classes it names"},
}


def lines(engine: str, version: str, sources: Sources, options: list[Option]) -> list[str]:
    spec = ENGINES[engine]
    out = [
        f"# {engine} {version}: every option string of {spec['what']}.",
        f"# Generated by sparkrack/engines/option_extract.py from {sources.origin()}",
        f"# read statically (ast) from {spec['files']};",
        "# nothing was imported or run. Regenerate:",
        f"#   pip download --no-deps {engine}=={version} -d /tmp/wheels",
        f"#   python tools/engine_options.py /tmp/wheels/{engine}-{version}-*.whl > THIS_FILE",
        "# or, from the image: invoke engines.learn --engine ENGINE --image REF.",
        "# Columns: OPTION TAKES [PRIMARY]; TAKES is value, none (a switch) or optional;",
        "# PRIMARY names the argument's first option string when OPTION is another name",
        "# for it. argparse's -h/--help are left out.",
        f"#: engine {engine}",
        f"#: version {version}",
        f"#: allow_abbrev {'true' if spec['abbrev'] else 'false'}",
        f"#: underscores {'true' if spec['underscores'] else 'false'}",
    ]
    seen: dict[str, str] = {}
    for option in options:
        primary = option.names[0]
        for index, name in enumerate(option.names):
            row = f"{name} {option.takes}" + (f" {primary}" if index else "")
            _add(seen, out, name, row, sources, option)
        for name in option.negatives:
            _add(seen, out, name, f"{name} {NONE}", sources, option)
    return out


def _add(seen: dict[str, str], out: list[str], name: str, row: str, sources: Sources,
         option: Option) -> None:
    if name in ("-h", "--help"):
        return
    if name in seen:
        sources.problems.append(f"{name} defined twice ({seen[name]} and {option.source})")
        return
    seen[name] = option.source
    out.append(row)


def installed(engine: str) -> tuple[Sources, str]:
    """(the sources of engine's package as this Python installed it, its version)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec(engine)  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"option_extract: no {engine} package is installed for {sys.executable}")
    folder = Path(list(spec.submodule_search_locations)[0])
    try:
        version = importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"option_extract: {engine} at {folder} has no installed metadata "
                         "(no version to name the table by)") from None
    return Sources(folder, root=folder.parent, package=engine), version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, nargs="?",
                        help="the engine's wheel (pip download --no-deps)")
    parser.add_argument("--installed", choices=sorted(ENGINES),
                        help="read the package this Python has installed instead")
    parser.add_argument("--sources", action="store_true",
                        help="add where each option is defined, as a comment")
    args = parser.parse_args(argv)
    if (args.wheel is None) == (args.installed is None):
        parser.error("give a WHEEL or --installed ENGINE")
    if args.installed:
        engine = args.installed
        sources, version = installed(engine)
    else:
        found = re.match(r"(sglang|vllm)-([0-9][^-]*)-", args.wheel.name)
        if not found:
            parser.error(f"{args.wheel.name}: not an sglang or vllm wheel")
        engine, version = found.groups()
        sources = Sources(args.wheel)
    options = ENGINES[engine]["reader"](sources)
    text = lines(engine, version, sources, options)
    if args.sources:
        by_name = {n: o.source for o in options for n in (*o.names, *o.negatives)}
        text = [f"{row:<60} # {by_name.get(row.split()[0], '')}" if not row.startswith("#")
                else row for row in text]
    print("\n".join(text))
    for problem in sources.problems:
        print(f"option_extract: {problem}", file=sys.stderr)
    return 1 if sources.problems else 0


if __name__ == "__main__":
    sys.exit(main())
