"""vLLM's options: `make_arg_parser` of `vllm serve`, then the engine's argument classes."""

from __future__ import annotations

import ast
import re

from .common import (
    NONE,
    OPTIONAL,
    VALUE,
    ActionReader,
    Option,
    Sources,
    add_argument_calls,
    const,
    dotted,
    find_class,
    find_function,
    find_method,
    imports,
    kebab,
    keyword,
    option_strings,
    strings,
    with_negatives,
)

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
        options.append(with_negatives(option, BOOL_OPTIONAL if boolean else None, True))
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
        spread = [v for k, v in zip(node.keys, node.values, strict=False) if k is None]
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
        return [with_negatives(Option(names, takes, source=where), action, True)]
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
        return [with_negatives(Option(names, takes, source=f"{where} {config}.{field_name}"),
                                BOOL_OPTIONAL if boolean else None, True)]
    return [Option(names, OPTIONAL if nargs in ("?", "*") else VALUE, source=where)]
