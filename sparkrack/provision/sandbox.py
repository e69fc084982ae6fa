"""The role sandbox: Jinja2's SandboxedEnvironment, bounded. A role may come from the
inventory (`.sparkrack/roles/`, from wherever that came) and renders here, often as root:
the sandbox keeps it from Python's internals, and these bounds keep what it builds small
(docs/security.md#a-role-template-is-bounded-in-size-and-work):

- any one value a template makes (text, list, mapping) holds at most MAX_VALUE characters
  or items, checked before the operations that could make more (`*`, `+`, `%`, `**`,
  str's `center`/`ljust`/`rjust`/`zfill`/`expandtabs`/`replace`/`join`/`format`, the
  filters `center`, `indent`, `format`, `replace`, `join`, `batch`, `slice`, `sum`) and
  after every call, filter, `~` and namespace assignment;
- one rendering makes at most MAX_WORK characters and items in all, and turns its loops
  at most MAX_TURNS times (a second or so of Python);
- an integer a template computes has at most MAX_INT_BITS bits;
- Jinja2's own `range` stops at 100,000 items; `lipsum` is gone.

Passing a bound raises LimitError; roles.py turns it (and any other error of a template)
into the task's one-line error.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

import jinja2
import jinja2.sandbox
from jinja2 import nodes
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

MAX_VALUE = 1 << 20  # a rendered unit or env file is a few KiB; 1 Mi characters is plenty
MAX_WORK = 16 << 20  # characters and items one rendering makes, in all
MAX_TURNS = 1 << 20  # loop turns of one rendering (a real template turns a few hundred)
MAX_INT_BITS = 1 << 14  # 16,384 bits: about 4,900 digits (Python prints up to 4,300)
MADE, TURNS = "sparkrack_made", "sparkrack_turns"  # the filters the bounds add to templates
_WIDTH = re.compile(r"\d+")  # the numbers of a format spec (widths, precisions)
_PERCENT = re.compile(r"%[#0 +-]*(\d+|\*)?(?:\.(\d+|\*))?")
_WIDENING = ("center", "ljust", "rjust", "zfill")  # str methods making a text of width arg

_spent: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "sparkrack_sandbox_spent", default=None)  # [work, turns] of the rendering


class LimitError(Exception):
    """A template passed one of the sandbox's bounds."""


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """One rendering: its own MAX_WORK and MAX_TURNS budget."""
    token = _spent.set([0, 0])
    try:
        yield
    finally:
        _spent.reset(token)


def _spend(units: int, what: str) -> None:
    spent = _spent.get()
    if spent is None:
        return
    spent[0] += units
    if spent[0] > MAX_WORK:
        raise LimitError(f"{what}: the template made over {MAX_WORK:,} characters and items "
                         "in one rendering")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set)) else 1


def _within(size: int, what: str) -> None:
    if size > MAX_VALUE:
        raise LimitError(f"{what} would make a value of {size:,} characters or items, over "
                         f"the {MAX_VALUE:,} a template may make")


def made(value: Any, what: str = "a value") -> Any:
    """value, counted against the rendering's budget; LimitError when it is over a bound."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise LimitError(f"{what} made an integer of over {MAX_INT_BITS:,} bits")
        return value
    size = _size(value)
    _within(size, what)
    _spend(size, what)
    return value


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- checks before an operation -------------------------------------------------------


def _binop(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                _within(len(seq) * max(times, 0), f"{type(seq).__name__} * {times}")
        if isinstance(left, int) and isinstance(right, int):
            _bits(left.bit_length() + right.bit_length(), "*")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int):
        if abs(left) > 1 and right > 0:
            _bits(left.bit_length() * right, f"{left} ** {right}")
    elif operator == "+" and isinstance(left, Sized) and isinstance(right, Sized):
        _within(_size(left) + _size(right), "+")
    elif operator == "%" and isinstance(left, str):
        _printf(left, right)


def _bits(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise LimitError(f"{what} would make an integer of over {MAX_INT_BITS:,} bits")


def _printf(text: str, args: Any) -> None:
    """`text % args`: no width or precision over MAX_VALUE, given in text or by `*`."""
    given = args if isinstance(args, tuple) else (args,)
    for width, precision in _PERCENT.findall(text):
        for number in (width, precision):
            if number.isdigit():
                _within(int(number), "a % format's width")
    if "*" in text:
        for arg in given:
            _within(abs(_number(arg)), "a % format's width")


def _format_spec(text: str, args: tuple, kwargs: Mapping) -> None:
    """str.format: no width in text's fields over MAX_VALUE, nor a nested one's value."""
    nested = False
    for _, field, spec, _ in string.Formatter().parse(text):
        if field is not None and spec:
            nested = nested or "{" in spec
            for number in _WIDTH.findall(spec):
                _within(int(number), "a format field's width")
    if nested:
        for arg in (*args, *kwargs.values()):
            _within(abs(_number(arg)), "a format field's width")


def _replaced(text: str, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(old, str) and isinstance(new, str):
        found = len(text) + 1 if old == "" else text.count(old)
        if isinstance(count, int) and count >= 0:
            found = min(found, count)
        _within(len(text) + found * (len(new) - len(old)), "replace")


def _joined(separator: Any, items: list) -> None:
    _within(sum(_size(item) for item in items) + _size(separator) * max(len(items) - 1, 0),
            "join")


def _bounded_list(items: Iterable, what: str) -> list:
    """items as a list, refused past MAX_VALUE items (a generator is read that far)."""
    listed = list(itertools.islice(iter(items), MAX_VALUE + 1))
    _within(len(listed), what)
    return listed


def _method(obj: Any, args: tuple, kwargs: dict) -> tuple:
    """Check a call of one of str's widening methods before it runs; the args to call it
    with (join's iterable read into a list)."""
    wrapped = getattr(obj, "__wrapped__", None)  # the sandbox's str.format / format_map
    if getattr(wrapped, "__name__", "") in ("format", "format_map") and isinstance(
            getattr(wrapped, "__self__", None), str):
        _format_spec(wrapped.__self__, args, args[0] if wrapped.__name__ == "format_map"
                     and args and isinstance(args[0], Mapping) else kwargs)
        return args
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(owner, str):
        return args
    if name in _WIDENING and args:
        _within(abs(_number(args[0])), f"str.{name}")
    elif name == "expandtabs":
        tab = _number(args[0]) if args else _number(kwargs.get("tabsize", 8))
        _within(len(owner) + owner.count("\t") * max(tab, 0), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        _replaced(owner, *args[:3])
    elif name == "join" and args:
        items = _bounded_list(args[0], "join")
        _joined(owner, items)
        return (items, *args[1:])
    return args


# --- the filters, bounded -------------------------------------------------------------


def _filter_checks() -> dict[str, Callable[[dict], None]]:
    """Per filter that could make more than it is given: a check of its arguments (by the
    names of its parameters) before it runs; join's and sum's iterable is read into a
    list there, bounded."""

    def center(a: dict) -> None:
        _within(abs(_number(a.get("width", 80))), "center")

    def indent(a: dict) -> None:
        width, text = a.get("width", 4), str(a["s"])
        unit = len(width) if isinstance(width, str) else max(_number(width), 0)
        _within(len(text) + (text.count("\n") + 1) * unit, "indent")

    def format_(a: dict) -> None:
        _printf(str(a["value"]), a.get("args") or a.get("kwargs") or ())

    def replace(a: dict) -> None:
        count = a.get("count")
        _replaced(str(a["s"]), a["old"], a["new"], -1 if count is None else count)

    def join(a: dict) -> None:
        a["value"] = _bounded_list(a["value"], "join")
        _joined(a.get("d", ""), [str(item) for item in a["value"]])

    def batch(a: dict) -> None:
        _within(abs(_number(a["linecount"])), "batch")

    def slice_(a: dict) -> None:
        _within(abs(_number(a["slices"])), "slice")

    def sum_(a: dict) -> None:
        a["iterable"] = items = _bounded_list(a["iterable"], "sum")
        if any(isinstance(item, (str, list, tuple)) for item in items):
            _within(sum(_size(item) for item in items), "sum")

    return {"center": center, "indent": indent, "format": format_, "replace": replace,
            "join": join, "batch": batch, "slice": slice_, "sum": sum_}


def _bounded_filter(name: str, function: Callable, check: Callable | None) -> Callable:
    """function with check before it (its arguments bound to its parameters' names) and
    made() after."""
    signature = inspect.signature(function) if check is not None else None

    @functools.wraps(function)  # keeps jinja_pass_arg: Jinja2 still passes what it asks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        if check is not None and signature is not None:
            bound = signature.bind(*args, **kwargs)
            check(bound.arguments)
            args, kwargs = bound.args, bound.kwargs
        return made(function(*args, **kwargs), f"the filter {name}")

    return bounded


@jinja2.pass_context  # never folded at compile time
def _made(context, value: Any) -> Any:
    return made(value, "~")


@jinja2.pass_context
def _turns(context, iterable: Any) -> Iterator:
    """The items of a loop, each turn counted against the rendering's budget."""
    spent = _spent.get()
    for item in iterable:
        if spent is not None:
            spent[1] += 1
            if spent[1] > MAX_TURNS:
                raise LimitError(f"a loop: the template's loops turned over {MAX_TURNS:,} "
                                 "times in one rendering")
        yield item


class _Counted(NodeTransformer):
    """Every loop's items through TURNS, every `~` through MADE."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, TURNS, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return nodes.Filter(node, MADE, [], [], None, None, lineno=node.lineno)


class BoundedNamespace(Namespace):
    """`namespace()`, whose attributes are bounded as every value."""

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, made(value, f"namespace.{name}"))


class BoundedSandbox(jinja2.sandbox.SandboxedEnvironment):
    """SandboxedEnvironment with the bounds above."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        checks = _filter_checks()
        self.filters = {name: _bounded_filter(name, function, checks.get(name))
                        for name, function in self.filters.items()}
        self.filters.update({MADE: _made, TURNS: _turns})
        self.globals.pop("lipsum", None)
        self.globals["namespace"] = BoundedNamespace
        self.concat = self._bounded_concat  # a template's whole output, a block set's, a macro's

    def add_filters(self, **added: Callable) -> None:
        """Filters of sparkrack's own, bounded as Jinja2's are."""
        self.filters.update({name: _bounded_filter(name, function, None)
                             for name, function in added.items()})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _binop(operator, left, right)
        return made(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        args = _method(__obj, args, kwargs)
        return made(super().call(__context, __obj, *args, **kwargs),
                    getattr(__obj, "__name__", "a call"))

    def _generate(self, source: nodes.Template, *args: Any, **kwargs: Any) -> str:
        return super()._generate(_Counted().visit(source), *args, **kwargs)

    @staticmethod
    def _bounded_concat(pieces: Iterable[str]) -> str:
        kept, size = [], 0
        for piece in pieces:
            size += len(piece)
            _within(size, "the output")
            kept.append(piece)
        _spend(size, "the output")
        return "".join(kept)
