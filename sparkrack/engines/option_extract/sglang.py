"""SGLang's options: the input namespaces' fields, then `ServerArgs.add_cli_args`."""

from __future__ import annotations

import ast

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
    find_method,
    kebab,
    keyword,
    option_strings,
    strings,
    with_negatives,
)

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
        options.append(with_negatives(Option(names, takes, source=f"{SGLANG_SERVER_ARGS}:"
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
            extra = {const(k): const(v) for k, v in zip(action_kwargs.keys, action_kwargs.values, strict=False)}
        if action is not None:
            takes = actions.takes(action, tree, {"nargs": nargs or extra.get("nargs")})
            options.append(with_negatives(Option(names, takes, source=where), action,
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
