"""The exact option names of the pinned engine versions (data in engines/options/).

`engines/options/<engine>-<version>.txt` lists every option string the engine's command
line accepts (tools/engine_options.py reads them from the engine's wheel; the header of
each file says how to regenerate it). Both engines' argparse parsers also accept a unique
prefix of an option (`--speculative-eagle-top` is `--speculative-eagle-topk`) and other
names for it (SGLang `--model` for `--model-path`, vLLM `-tp`, `--max_model_len`): a
profile must spell each option in full, by its first name, so that the reserved-flag guard
and the safety rules, which compare names exactly, see what the engine will do.

`options_for(engine)` is None for an engine without a pinned list (profile files of such
engines get the syntax checks only). `OptionSet.problem(flag)` says what is wrong with a
flag as written; `OptionSet.canonical(flag)` is the option the engine reads it as.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PINNED = {"sglang": "0.5.22", "vllm": "0.33.0"}  # the versions the shipped images run
OPTIONS_DIR = Path(__file__).with_name("options")
VALUE, NONE, OPTIONAL = "value", "none", "optional"


@dataclass(frozen=True)
class OptionSet:
    """Every option string of one engine version: what it takes, and its first name."""

    engine: str
    version: str
    file: Path
    takes: dict[str, str]  # option string -> value | none | optional
    primary: dict[str, str]  # option string -> the first option string of its argument
    allow_abbrev: bool  # the engine's parser takes a unique prefix for the option
    underscores: bool  # and `--max_model_len` for `--max-model-len` (vLLM)

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def resolve(self, flag: str) -> tuple[str | None, list[str]]:
        """(the option string the engine reads flag as, or None; the candidates when flag
        is an ambiguous prefix)."""
        name = flag.split("=", 1)[0]
        if name in self.takes:
            return name, []
        if self.underscores and name.startswith("--"):
            dashed = "--" + name[2:].replace("_", "-")
            if dashed in self.takes:
                return dashed, []
            name = dashed
        if self.allow_abbrev and name.startswith("--") and len(name) > 2:
            matches = [option for option in self.takes if option.startswith(name)]
            if len(matches) == 1:
                return matches[0], []
            return None, matches
        return None, []

    def canonical(self, flag: str) -> str:
        """The first name of the option the engine reads flag as; flag itself when the
        engine would refuse it (unknown or ambiguous)."""
        found, _ = self.resolve(flag)
        return self.primary[found] if found else flag.split("=", 1)[0]

    def problem(self, flag: str) -> tuple[str, str] | None:
        """(what is wrong, the fix) unless flag is an option's first name, spelled in full."""
        name = flag.split("=", 1)[0]
        if name in self.takes and self.primary[name] == name:
            return None
        if name in self.takes:
            first = self.primary[name]
            return (f"{name} is another name for {first}",
                    f"write {first}: one spelling per option, as the rules compare names")
        found, candidates = self.resolve(name)
        if found is not None and self.primary[found] != found:
            found = self.primary[found]
        if found is not None and "_" in name and name.replace("_", "-") == found:
            return (f"{self.label} reads {name} as {found}; write {found}",
                    f"write {found}")
        if found is not None:
            return (f"{name} is an abbreviation of {found}; spell it in full",
                    f"write {found}")
        if candidates:
            shown = ", ".join(sorted({self.primary[c] for c in candidates})[:4])
            return (f"{name} is an abbreviation of several {self.label} options ({shown}"
                    f"{', ...' if len(candidates) > 4 else ''}); spell one in full",
                    f"write the option in full; all of them: {self.shown_file()}")
        base = name.split(".", 1)[0]
        if "." in name and self.underscores and self.resolve(base)[0]:
            whole = self.primary[self.resolve(base)[0]]
            return (f"{name}: give {whole} as one JSON value, not key by key",
                    f"write {whole}: '{{\"{name.split('.', 1)[1]}\": ...}}'")
        close = difflib.get_close_matches(name, sorted(set(self.primary.values())), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return (f"unknown {self.label} option {name}{hint}",
                f"the options of {self.label} are listed in {self.shown_file()}")

    def value_problem(self, flag: str, value: object) -> tuple[str, str] | None:
        """(what is wrong, the fix) when a profile gives a switch a value or a valued
        option none (value True: written as a bare switch)."""
        takes = self.takes.get(flag)
        if takes == VALUE and value is True:
            return f"{flag} takes a value", f"write {flag}: VALUE"
        if takes == NONE and value is not True:
            return f"{flag} is a switch and takes no value", f"write {flag}: true"
        return None

    def shown_file(self) -> str:
        """The data file, relative to the repository when it is in it."""
        try:
            return str(self.file.relative_to(Path(__file__).resolve().parents[2]))
        except ValueError:
            return str(self.file)


@functools.cache
def options_for(engine: str) -> OptionSet | None:
    """The pinned option set of engine, or None when sparkrack pins no version of it."""
    version = PINNED.get(engine)
    if version is None:
        return None
    return read_options(OPTIONS_DIR / f"{engine}-{version}.txt")


def read_options(file: Path) -> OptionSet:
    """One option list file (format: tools/engine_options.py)."""
    header: dict[str, str] = {}
    takes: dict[str, str] = {}
    primary: dict[str, str] = {}
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#:"):
            key, _, value = line[2:].strip().partition(" ")
            header[key] = value.strip()
            continue
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split()
        if len(words) not in (2, 3) or words[1] not in (VALUE, NONE, OPTIONAL):
            raise ValueError(f"{file}:{number}: expected OPTION TAKES [PRIMARY]")
        takes[words[0]] = words[1]
        primary[words[0]] = words[2] if len(words) == 3 else words[0]
    return OptionSet(engine=header["engine"], version=header["version"], file=file,
                     takes=takes, primary=primary,
                     allow_abbrev=header.get("allow_abbrev") == "true",
                     underscores=header.get("underscores") == "true")


def canonical_names(engine: str) -> Callable[[str], str] | None:
    """The function naming a flag as the engine reads it (OptionSet.canonical), or None
    for an engine without a pinned list."""
    options = options_for(engine)
    return None if options is None else options.canonical
