"""The rendering of role texts: params, expressions and templates, in Jinja2's sandbox,
bounded (sandbox.py), each distinct text compiled once (docs/provisioning.md#writing-a-role,
docs/security.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from sparkrack.facts.roce import netdev_of
from sparkrack.provision import sandbox
from sparkrack.provision.roletasks import Role
from sparkrack.provision.sandbox import BoundedSandbox

MAX_TEMPLATE_BYTES = 1 << 20  # a template file is a few KiB
_NATIVE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.DOTALL)


class RenderError(Exception):
    """A template or expression could not be rendered; the message says why."""


def _refuse_newlines(value: Any, what: str) -> str:
    text = "" if value is None else str(value)
    if any(c in text for c in "\n\r\0"):
        raise RenderError(f"{what}: value holds a line break or NUL, which the file format "
                          "cannot carry literally")
    return text


def envvalue(value: Any) -> str:
    """A value for a KEY=VALUE env file (docker --env-file: taken literally to the line end)."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return _refuse_newlines(value, "env value")


def oneline(value: Any) -> str:
    """A value on one line (comments, descriptions)."""
    return _refuse_newlines(value, "one-line value")


def _environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """Jinja2's sandbox, bounded (sandbox.py): a role may come from the inventory
    (`.sparkrack/roles/`), and what it renders runs here, often as root; an expression
    reaching Python's internals (`''.__class__`, `cycler.__init__.__globals__`) is a
    SecurityError, one building too much a LimitError: the task's error."""
    env = BoundedSandbox(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
        lstrip_blocks=True, autoescape=False, loader=loader)
    env.add_filters(envvalue=envvalue, oneline=oneline, netdev_of=netdev_of,
                    to_json=lambda v: json.dumps(v, sort_keys=True))
    return env


class Renderer:
    """Renders role params, expressions and templates with one Jinja2 environment; each
    distinct string, expression and template is compiled once (every node renders the same
    role texts with its own context)."""

    def __init__(self) -> None:
        self.env = _environment()
        self._templates: dict[Path, jinja2.Template] = {}
        self._strings: dict[str, jinja2.Template] = {}
        self._expressions: dict[str, Callable[..., Any]] = {}

    def value(self, raw: Any, context: Mapping[str, Any]) -> Any:
        """raw with every string rendered; a lone {{ expr }} keeps the expression's type."""
        if isinstance(raw, str):
            if "{{" not in raw and "{%" not in raw:
                return raw
            native = _NATIVE.match(raw)
            if native:
                return self.expr(native.group("expr"), context)
            return self._guard(lambda: self._string(raw).render(context), raw)
        if isinstance(raw, Mapping):
            return {key: self.value(item, context) for key, item in raw.items()}
        if isinstance(raw, (list, tuple)):
            return [self.value(item, context) for item in raw]
        return raw

    def expr(self, text: str, context: Mapping[str, Any]) -> Any:
        """The value of one Jinja2 expression."""
        return self._guard(lambda: self._expression(text.strip())(context), text)

    def _string(self, raw: str) -> jinja2.Template:
        if raw not in self._strings:
            self._strings[raw] = self.env.from_string(raw)
        return self._strings[raw]

    def _expression(self, text: str) -> Callable[..., Any]:
        if text not in self._expressions:
            self._expressions[text] = self.env.compile_expression(text, undefined_to_none=False)
        return self._expressions[text]

    def template(self, role: Role, src: str, context: Mapping[str, Any]) -> str:
        """The rendered template src of role."""
        path = role.template_path(src)
        if path not in self._templates:
            try:
                with open(path, "rb") as file:
                    text = file.read(MAX_TEMPLATE_BYTES + 1)
                if len(text) > MAX_TEMPLATE_BYTES:
                    raise RenderError(f"template {src}: over {MAX_TEMPLATE_BYTES >> 20} MiB (a "
                                      "template is a few KiB: is it the right file?)")
                self._templates[path] = self.env.from_string(text.decode("utf-8"))
            except OSError as error:
                raise RenderError(f"template {src}: {error.strerror}") from None
            except UnicodeDecodeError:
                raise RenderError(f"template {src}: not UTF-8 text") from None
            except jinja2.TemplateSyntaxError as error:
                raise RenderError(f"template {src}:{error.lineno}: {error.message}") from None
        return self._guard(lambda: self._templates[path].render(context), src)

    @staticmethod
    def _guard(render, what: str) -> Any:
        """render()'s value; any error of the template (an undefined name, the sandbox's
        refusal, a bound passed, a Python error of what it called) as RenderError, one line
        naming what was rendered (cut to a line of its own length)."""
        where = what.strip().splitlines()[0][:120] if what.strip() else "a value"
        try:
            with sandbox.rendering():
                value = render()
        except RenderError:
            raise
        except jinja2.UndefinedError as error:
            raise RenderError(f"{where}: {error.message}") from None
        except (jinja2.TemplateError, sandbox.LimitError, TypeError, ValueError, KeyError,
                AttributeError) as error:
            raise RenderError(f"{where}: {_first_line(error)}") from None
        except Exception as error:  # RecursionError, MemoryError, IndexError, ... included
            raise RenderError(f"{where}: {type(error).__name__}: {_first_line(error)}"
                              ) from None
        if isinstance(value, jinja2.Undefined):
            raise RenderError(f"{where}: undefined")
        return value


def _first_line(error: BaseException) -> str:
    """An error's text on one line, cut to 300 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."
