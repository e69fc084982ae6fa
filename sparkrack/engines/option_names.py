"""The exact option names of each engine version, and which version a lane's image runs.

`OptionSet.problem(flag)` says what is wrong with a flag as written; `canonical(flag)` is
the option the engine reads it as (docs/engines.md#engine-versions-and-upgrades).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PINNED = {"sglang": "0.5.22", "vllm": "0.33.0"}  # the versions the shipped profiles run
OPTIONS_DIR = Path(__file__).with_name("options")
LEARNED_DIR = Path(".sparkrack") / "engines" / "options"  # in an inventory directory
VERSION_LABEL = "org.opencontainers.image.version"  # an image's own word for its version
VALUE, NONE, OPTIONAL = "value", "none", "optional"
TAG_VERSION = re.compile(r":v?(\d+\.\d+\.\d+(?:(?:rc|a|b|\.post|\.dev)\d+)?)"
                         r"(?:[-_+][A-Za-z0-9._-]*)?$")


@dataclass(frozen=True)
class EngineVersion:
    """The engine version a lane's image runs, and where that was read."""

    engine: str
    image: str
    version: str | None  # None: the image names none and was not learned
    source: str  # "image" (learned from the image itself), "tag", or "none"

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}" if self.version else f"{self.engine} (no version)"

    def describe(self) -> str:
        """'sglang 0.5.22 (the tag of lmsysorg/sglang:v0.5.22-cu130)' and the like."""
        where = {"image": "read from the image by engines.learn", "tag": "the image's tag",
                 "none": "no version in the tag, not learned"}[self.source]
        return f"{self.label} ({where}: {self.image})"


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
    image: str | None = None  # the image ref the table was learned from (engines.learn)
    image_id: str | None = None  # and that image's ID then
    previous: OptionSet | None = None  # the version before it, to name what a release dropped

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
        dropped = self.previous.resolve(name)[0] if self.previous is not None else None
        if dropped is not None:
            return self._dropped(name, self.previous.primary[dropped])
        close = difflib.get_close_matches(name, sorted(set(self.primary.values())), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return (f"unknown {self.label} option {name}{hint}",
                f"its options: {self.shown_file()}")

    def _dropped(self, name: str, old: str) -> tuple[str, str]:
        """(what is wrong, the fix) for an option the previous version had and this lacks."""
        kind = self.previous.takes[old]
        new = sorted({first for first in self.primary.values()
                      if first not in self.previous.takes and self.takes[first] == kind})
        renamed = difflib.get_close_matches(old, new, n=1, cutoff=0.75)
        return (f"{self.label} has no option {name}: {self.previous.label} had it, "
                + (f"{self.version} likely renamed it {renamed[0]}" if renamed
                   else f"{self.version} removed it"),
                f"write {renamed[0]}" if renamed else f"drop {name} from the profile")

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


def tag_version(image: str) -> str | None:
    """The engine version an image ref's tag names (`:v0.5.22-cu130` is 0.5.22), if any."""
    found = TAG_VERSION.search(image.split("@", 1)[0])
    return found.group(1) if found else None


def version_key(version: str) -> tuple[int, ...]:
    """A sort key for versions: the numbers of the release part (0.5.22 -> (0, 5, 22))."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+", 1)[0])[:4])


def version_below(versions, version: str) -> str | None:
    """The highest of versions below version, or None."""
    below = [v for v in versions if version_key(v) < version_key(version)]
    return max(below, key=version_key) if below else None


def table_dirs(inventory_dir: Path | None) -> tuple[Path, ...]:
    """The folders searched for option tables: the inventory's learned ones, then the
    shipped ones."""
    learned = Path(inventory_dir) / LEARNED_DIR if inventory_dir is not None else None
    return ((learned,) if learned is not None and learned.is_dir() else ()) + (OPTIONS_DIR,)


def tables(engine: str, inventory_dir: Path | None = None) -> dict[str, OptionSet]:
    """{version: OptionSet} of every table of engine, the inventory's winning over the
    shipped one of the same version; sorted by version."""
    found: dict[str, OptionSet] = {}
    for folder in reversed(table_dirs(inventory_dir)):
        for file in sorted(folder.glob(f"{engine}-*.txt")):
            options = read_options(file)
            if options.engine == engine:
                found[options.version] = options
    return dict(sorted(found.items(), key=lambda item: version_key(item[0])))


def image_version(engine: str, image: str, inventory_dir: Path | None = None) -> EngineVersion:
    """The version image runs: a learned table's (its header names this ref), else the tag's."""
    for version, options in reversed(tables(engine, inventory_dir).items()):
        if options.image == image:
            return EngineVersion(engine, image, version, "image")
    version = tag_version(image)
    return EngineVersion(engine, image, version, "tag" if version else "none")


def options_for(engine: str, version: str | None = None,
                inventory_dir: Path | None = None) -> OptionSet | None:
    """The option table of engine's version (default: the pinned one), or None when there
    is none (an engine sparkrack pins no version of, or a version nobody added)."""
    version = version or PINNED.get(engine)
    if version is None:
        return None
    return tables(engine, inventory_dir).get(version)


def lane_options(engine: str, image: str,
                 inventory_dir: Path | None = None) -> tuple[EngineVersion, OptionSet | None]:
    """(the version image runs, its option table or None)."""
    version = image_version(engine, image, inventory_dir)
    if engine not in PINNED or version.version is None:
        return version, None
    known = tables(engine, inventory_dir)
    options = known.get(version.version)
    below = version_below(known, version.version)
    if options is None or below is None:
        return version, options
    return version, dataclasses.replace(options, previous=known[below])


def read_options(file: Path) -> OptionSet:
    """One option list file (format: engines/option_extract/cli.py), cached per file state."""
    stat = Path(file).stat()
    return _read_options(Path(file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read_options(file: Path, _mtime_ns: int, _size: int) -> OptionSet:
    header: dict[str, str] = {}
    takes: dict[str, str] = {}
    primary: dict[str, str] = {}
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#:"):
            key, _, value = line[2:].strip().partition(" ")
            if key in header:  # one said later must not win: the header is the first's
                raise ValueError(f"{file}:{number}: '#: {key}' twice")
            header[key] = value.strip()
            continue
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split()
        if len(words) not in (2, 3) or words[1] not in (VALUE, NONE, OPTIONAL):
            raise ValueError(f"{file}:{number}: expected OPTION TAKES [PRIMARY]")
        takes[words[0]] = words[1]
        primary[words[0]] = words[2] if len(words) == 3 else words[0]
    missing = [key for key in ("engine", "version") if key not in header]
    if missing:
        raise ValueError(f"{file}: no '#: {missing[0]} ...' header line")
    return OptionSet(engine=header["engine"], version=header["version"], file=file,
                     takes=takes, primary=primary,
                     allow_abbrev=header.get("allow_abbrev") == "true",
                     underscores=header.get("underscores") == "true",
                     image=header.get("image"), image_id=header.get("image_id"))


def checked_against(version: EngineVersion | None, options: OptionSet | None) -> str:
    """One line: the table a profile's flags were checked against, and why that one."""
    if options is None:
        what = version.label if version else "this engine"
        return f"no option table for {what} (rule ENGINE-VERSION refuses the lane)"
    why = f"; {version.describe()}" if version else ""
    return f"the {options.label} option table ({options.shown_file()}{why})"


def canonical_names(options: OptionSet | None) -> Callable[[str], str] | None:
    """The function naming a flag as the engine reads it (OptionSet.canonical), or None
    without a table."""
    return None if options is None else options.canonical
