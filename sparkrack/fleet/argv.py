"""Remote commands as argv lists: the one place they are quoted, and secret arguments.

A command is a list of arguments, never a string. `quote_argv` turns it into the single
shell-quoted line that SSH carries. A shell pipeline is `sh(SCRIPT, value, ...)`: the
script is a constant and inventory values arrive as its positional parameters ("$1"),
never formatted into the script text. An argument wrapped in `Secret` is sent as is but
shown as *** anywhere the fleet describes the command (errors, summaries, repr).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

REDACTED = "***"


@dataclass(frozen=True)
class Secret:
    """An argument whose value must never be shown: it prints, formats and reprs as ***."""

    value: str = field(repr=False)

    def __str__(self) -> str:
        return REDACTED

    def __repr__(self) -> str:
        return f"Secret({REDACTED})"


Arg = str | Secret
Argv = Sequence[Arg]


def quote_argv(argv: Argv) -> str:
    """The command line that runs argv literally under a POSIX shell (secrets revealed)."""
    return _join(argv, reveal=True)


def redact_argv(argv: Argv) -> str:
    """The command line of argv for messages: secret arguments shown as ***."""
    return _join(argv, reveal=False)


def sh(script: str, *args: Arg) -> list[Arg]:
    """argv running a constant shell script with args as "$1", "$2", ... (never in the text)."""
    return ["sh", "-c", script, "sh", *args]


def secret_values(argvs: Iterable[Argv]) -> tuple[str, ...]:
    """The values of the Secret arguments in argvs, to blank them out of output too."""
    return tuple(dict.fromkeys(arg.value for argv in argvs for arg in argv
                               if isinstance(arg, Secret) and arg.value))


def redact_text(text: str, secrets: Sequence[str]) -> str:
    """text with every occurrence of a secret value replaced by ***."""
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def _join(argv: Argv, *, reveal: bool) -> str:
    """argv shell-quoted and joined; secrets as their value if reveal, else as ***."""
    if isinstance(argv, (str, bytes)) or not argv:
        raise ValueError("a command is a non-empty list of arguments, not a string")
    return " ".join(REDACTED if isinstance(arg, Secret) and not reveal else shlex.quote(_text(arg))
                    for arg in argv)


def _text(arg: Arg) -> str:
    """The value of one argument; TypeError or ValueError for what no shell can carry."""
    if isinstance(arg, Secret):
        text = arg.value
    elif isinstance(arg, str):
        text = arg
    else:
        raise TypeError(f"command argument must be str or Secret, got {type(arg).__name__}")
    if "\0" in text:
        raise ValueError("a command argument cannot contain a NUL byte")
    return text
