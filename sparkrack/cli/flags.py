"""The flag conventions of every task, in one place (docs/internals.md#flags): every task is
made with this module's `task`, which gives

- short flags from SHORT only: one letter, one meaning, in every task; a flag not in SHORT
  (and every flag that overrides a safety: --force, --override-power, ...) is long only;
- numbers as numbers: a flag in NUMBERS, or one whose default is a number, takes only a
  number (`--wait abc` is one line, exit 2) and `--help` shows SECONDS, INT or NUMBER;
- `--limit` for the nodes a task works on (`--node`/`-n` for the one node it acts on); where
  a task called it `--nodes`, that name stays accepted and says so (RENAMED_LIMIT).

tests/unit/cli/test_flag_conventions.py holds every task to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from invoke import Task
from invoke import task as invoke_task
from invoke.exceptions import Exit
from invoke.parser import Argument, ParserContext
from invoke.parser.context import to_flag

from sparkrack.core import console

# The short flags: long name -> its one letter, the same in every task that has the flag
SHORT = {
    "inventory": "i", "json": "j", "wait": "w", "limit": "l", "check": "c", "diff": "d",
    "timeout": "t", "engine": "e", "profile": "p", "node": "n", "yes": "y", "out": "o",
    "since": "s", "follow": "f", "model": "m", "quiet": "q",
}

LIMIT_HELP = "only these nodes or groups, e.g. spark-01,spark-03 (default: every node)"
QUIET_HELP = ("one line per node as its copy starts and ends, no progress bars (what a pipe "
              "gets too)")
# --limit was --nodes in run, logs, reboot, caches, weights and rehearsal.stub-model
RENAMED_LIMIT = {"nodes": "limit"}


@dataclass(frozen=True)
class Number:
    """A number flag's kind: invoke casts the flag's text with it (0 or more, finite).
    label: what --help shows after the flag; cast: int or float; what: the value as error
    lines name it; give, example: what to give instead, and a value."""

    label: str
    cast: type
    what: str
    give: str
    example: str
    flag: str = ""

    @property
    def __name__(self) -> str:  # invoke's Argument repr names its kind
        return self.label

    def __call__(self, text):
        try:
            value = self.cast(text)
        except (TypeError, ValueError):
            value = None
        if value is None or not math.isfinite(value) or value < 0:
            raise Exit(f"error: --{self.flag} {text}: not {self.what} (give {self.give}, 0 or "
                       f"more, e.g. --{self.flag} {self.example})", code=2)
        return value

    def of(self, flag: str) -> Number:
        """This kind for one flag (named in its error lines)."""
        return replace(self, flag=flag)


SECONDS = Number("SECONDS", float, "a number of seconds", "seconds", "30")
INT = Number("INT", int, "a whole number", "a whole number", "2")
NUMBER = Number("NUMBER", float, "a number", "a number", "2")

# Number flags whose default is None (a default's type says it for the others)
NUMBERS = {
    "wait": SECONDS, "timeout": SECONDS, "seconds": SECONDS, "grace": SECONDS,
    "interval": SECONDS, "duration": SECONDS, "off_seconds": SECONDS, "burn_seconds": SECONDS,
    "batch_size": INT, "verdicts": INT, "tail": INT, "context": INT, "tokens": INT,
    "bwlimit": Number("NUMBER", float, "a number of MiB/s", "MiB/s", "500"),
    "degrees": Number("NUMBER", float, "a number of degrees C", "degrees", "40"),
    "watts": Number("INT", int, "a whole number of watts", "watts", "300"),
    "mtu": Number("INT", int, "an MTU in bytes", "bytes", "9000"),
    "rate": Number("INT", int, "a rate", "a whole number", "100"),
    "index": INT, "moving": Number("INT", int, "a seed", "a whole number", "7"),
    "outlet": Number("INT", int, "an outlet number", "its number", "10"),
}


class SparkrackTask(Task):
    """invoke's Task with the conventions above: no automatic short flags; renamed: {old
    flag: its new name}, each old name still accepted, saying so."""

    def __init__(self, body, renamed=None, **kwargs):
        kwargs["auto_shortflags"] = False
        super().__init__(body, **kwargs)
        self.renamed = dict(renamed or {})
        self._help = dict(self.help)  # invoke pops self.help: each parse gets it whole

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        flag = opts["names"][0]
        if name in SHORT:
            opts["names"] = [flag, SHORT[name]]
        kind = NUMBERS.get(name)
        if kind is None and type(default) in (int, float):
            kind = INT if type(default) is int else NUMBER
        if kind is not None:
            opts["kind"] = kind.of(flag)
        return opts

    def get_arguments(self, ignore_unknown_help=None):
        self.help = dict(self._help)
        arguments = super().get_arguments(ignore_unknown_help)
        by_name = {argument.name: argument for argument in arguments}
        for old, new in self.renamed.items():
            arguments.append(Argument(names=(old,), kind=by_name[new].kind,
                                      help=f"the old name of --{_flag(new)}, still accepted "
                                           "(it says so)"))
        return arguments

    def __call__(self, *args, **kwargs):
        for old, new in self.renamed.items():
            value = kwargs.pop(old, None)
            if value is None:
                continue
            if kwargs.get(new) not in (None, value):
                raise Exit(f"error: --{_flag(old)} and --{_flag(new)} both given (--{_flag(old)} "
                           f"is the old name of --{_flag(new)}: give --{_flag(new)} only)", code=2)
            console.say(f"note: --{_flag(old)} is the old name of --{_flag(new)}; use "
                        f"--{_flag(new)}")
            kwargs[new] = value
        return super().__call__(*args, **kwargs)



def _flag(name: str) -> str:
    return name.replace("_", "-")


def task(*args, **kwargs):
    """invoke's @task, making a SparkrackTask."""
    return invoke_task(*args, klass=SparkrackTask, **kwargs)


def _help_for(context: ParserContext, flag: str):
    """invoke's help_for, which knows only STRING and INT: a Number flag shows its label
    (`-w SECONDS, --wait=SECONDS`) where invoke would show a float flag as a switch."""
    argument = context.flags.get(flag)
    label = getattr(getattr(argument, "kind", None), "label", None)
    if label is None:
        return _STOCK["help_for"](context, flag)
    names = [f"{name} {label}" if len(name.strip("-")) == 1 else f"{name}={label}"
             for name in context.names_for(flag)]
    return ", ".join(sorted(names, key=len)), argument.help or ""


def _help_tuples(context: ParserContext):
    """The flags' help in the order of their long names (invoke puts the flags without a
    short one first: with few short flags, the list read out of order)."""
    arguments = sorted(context.flags.values(), key=lambda argument: argument.name.replace(
        "_", "-"))
    return [context.help_for(to_flag(argument.name)) for argument in arguments]


# invoke has no hook for a flag's kind in --help (its own TODO in Task.arg_opts): both doors,
# `invoke` in a checkout and `sparkrack`, read the help through these two methods
_STOCK = {name: getattr(ParserContext, name).__dict__.get("stock", getattr(ParserContext, name))
          for name in ("help_for", "help_tuples")}
for _name, _ours in (("help_for", _help_for), ("help_tuples", _help_tuples)):
    _ours.stock = _STOCK[_name]
    setattr(ParserContext, _name, _ours)
