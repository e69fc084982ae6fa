"""Engine profile files (`<engine>.yml`, found by catalog.py) read into an EngineDef with
its Profiles; every key checked, a mistake an InventoryError at file:line. The format, a
rank's argv and env: docs/formats.md#engine-profiles.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.core.errors import UsageError, allowed_fix, did_you_mean
from sparkrack.engines.catalog import engine_file
from sparkrack.engines.datafile import (
    Section,
    is_line,
    is_name,
    is_word_list,
    read_section,
)
from sparkrack.engines.option_names import (
    EngineVersion,
    OptionSet,
    lane_options,
    options_for,
)
from sparkrack.engines.serving import Serving, serving_of
from sparkrack.engines.templates import allowed_fields, check_template
from sparkrack.inventory.ranges import RANGES
from sparkrack.inventory.schema import FrozenMapping, describe
from sparkrack.inventory.values import abs_path_problem, has_control

FLAG_ROLES = ("context_length", "kv_cache_dtype", "max_running_requests")
ARG_GROUPS = ("model", "every_rank", "head", "workers")
_TOP_KEYS = ("engine", "image_key", "entrypoint", "ports", "health_path", "flag_roles", "args",
             "env_from_inventory", "secret_env", "profiles", "serving")
_PROFILE_KEYS = ("description", "extends", "flags", "env", "ready_timeout_s", "stop_timeout_s",
                 "stall_budget_s", "experimental", "note", "waivers", "model_path")
# A group with requests pending whose token counters stand still while its GPUs do not all
# compute alike is stalled after this long (watchdog/progress.py). Legitimate pauses of that
# shape last seconds: tokenizing a 512K prompt, scheduling, a first request's warm-up; the
# engines' own watchdogs end a hung group after 300 s (SGLang --watchdog-timeout, vLLM's
# execute-model timeout) or 600 s (NCCL). 60 s finds a wedge five times sooner.
STALL_BUDGET_S = 60
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_OPTION_WORD = re.compile(r"--?[A-Za-z]")  # an argv word naming an option (-tp, --x, --x=1)
_NUMBER = re.compile(r"-[0-9.]")  # a negative number is a value, not an option
_URL_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RULE_ID = re.compile(r"[A-Z0-9][A-Z0-9-]*")
_VALUE_HELP = "a string or an integer ('quote' other numbers so the text stays exact)"
# Options by which the pinned engines read more options from a file (vLLM and SGLang
# `--config FILE`, YAML): what it sets would pass `invoke check` unseen.
SETTINGS_FILE_OPTIONS = frozenset({"--config"})


@dataclass(frozen=True)
class RankArgs:
    """The per-rank argv templates of an engine, in the order they are placed."""

    model: tuple[str, ...]
    every_rank: tuple[str, ...]
    head: tuple[str, ...]
    workers: tuple[str, ...]


@dataclass(frozen=True)
class Profile:
    """One named configuration of an engine, with `extends` already applied."""

    name: str
    description: str
    flags: FrozenMapping  # flag -> value text, or True for a bare switch; in argv order
    env: FrozenMapping  # var -> value text
    ready_timeout_s: int
    stop_timeout_s: int
    experimental: bool
    note: str | None
    stall_budget_s: int = STALL_BUDGET_S
    waivers: FrozenMapping = field(default_factory=lambda: FrozenMapping({}))  # rule id -> reason
    model_path: str | None = None  # this lane's model directory (None: the inventory's)

    def argv(self) -> tuple[str, ...]:
        """The flags as argv tokens, in order."""
        return tuple(token for flag, value in self.flags.items()
                     for token in ((flag,) if value is True else (flag, value)))


@dataclass(frozen=True)
class EngineDef:
    """An engine's profile file: how to start it and its named profiles."""

    name: str
    file: Path
    image_key: str
    entrypoint: tuple[str, ...]
    ports: FrozenMapping  # port name -> number
    health_path: str
    flag_roles: FrozenMapping  # role (FLAG_ROLES) -> flag
    args: RankArgs
    secret_env: tuple[str, ...]
    profiles: FrozenMapping  # name -> Profile
    serving: Serving  # what sparkrack reads of it running (serving.py)
    options: OptionSet | None = None  # the option table the flags were checked against
    version: EngineVersion | None = None  # the version of the image (None: not asked)

    def profile(self, name: str) -> Profile:
        """The profile called name; UsageError naming the valid profiles if there is none."""
        if name not in self.profiles:
            raise UsageError(
                f"unknown {self.name} profile '{name}'{did_you_mean(name, self.profiles)}",
                fix=f"valid profiles ({self.file}): {', '.join(self.profiles)}")
        return self.profiles[name]

    def setting(self, profile: Profile, role: str) -> str | None:
        """The value profile gives the flag with this role (FLAG_ROLES), if it sets one."""
        value = profile.flags.get(self.flag_roles.get(role))
        return value if isinstance(value, str) else None


def load_engine(inventory_dir: Path, engine: str, images: Mapping[str, str] | None = None, *,
                image: str | None = None) -> EngineDef:
    """The engine's profile file for this inventory (see catalog.py), read and checked
    against the option table of the version its image runs: `image`, else the inventory's
    `images` entry for the file's image_key (neither: the pinned version's table)."""
    return read_engine_file(engine_file(inventory_dir, engine), images, image=image,
                            inventory_dir=inventory_dir)


def image_key_of(inventory_dir: Path, engine: str) -> str:
    """The key into the inventory's images of engine's profile file, read without checking
    the profiles (a profile that the image's version refuses still names its image)."""
    top = read_section(engine_file(inventory_dir, engine), _TOP_KEYS)
    return top.value("image_key", is_name, "a key of the inventory's images")


def read_engine_file(file: Path, images: Mapping[str, str] | None = None, *,
                     image: str | None = None, inventory_dir: Path | None = None) -> EngineDef:
    """One profile file, read and checked; InventoryError at file:line for any mistake.

    For an engine with an option table (option_names) for the version its image runs,
    every flag of the profiles, of `args` and of `flag_roles` must be one of its options,
    spelled in full by its first name: a prefix or another name that the engine would
    take is refused, naming the option. Without a table for that version only the syntax
    is checked here (rule ENGINE-VERSION refuses the lane).
    """
    top = read_section(file, _TOP_KEYS)
    _refuse_env_from_inventory(top)
    name = top.value("engine", is_name, "the engine name")
    if name != file.stem:
        raise top.error("engine", f"engine '{name}' in a file named {file.name}",
                        fix=f"write engine: {file.stem}, or rename the file to {name}.yml")
    image_key = top.value("image_key", is_name, "a key of the inventory's images")
    image = image or (images or {}).get(image_key)
    version, options = ((None, options_for(name)) if image is None
                        else lane_options(name, image, inventory_dir))
    ports = _ports(top.section("ports"))
    args = _args(top.section("args", ARG_GROUPS), allowed_fields(ports), options)
    secret_env = tuple(top.value(
        "secret_env", lambda v: isinstance(v, list) and all(
            isinstance(i, str) and _ENV.fullmatch(i) for i in v), "a list of variable names",
        default=[]))
    reserved = {token.split("=", 1)[0] for group in ARG_GROUPS for token in getattr(args, group)
                if _OPTION_WORD.match(token)}
    return EngineDef(
        name=name, file=file, image_key=image_key, options=options, version=version,
        entrypoint=tuple(top.value("entrypoint", lambda v: is_word_list(v) and bool(v),
                                   "a non-empty list of argv words")),
        ports=FrozenMapping(ports),
        health_path=top.value("health_path", lambda v: isinstance(v, str) and bool(
            _URL_PATH.fullmatch(v)), "a path such as /health"),
        flag_roles=_flag_roles(top.section("flag_roles", required=False), options),
        args=args,
        secret_env=secret_env, serving=serving_of(top, options),
        profiles=_Resolver(top.section("profiles"), reserved, set(secret_env), options).all())


def _ports(section: Section) -> dict[str, int]:
    """The ports mapping: names to numbers, `http` among them."""
    ports = {}
    for name in section:
        if not (isinstance(name, str) and name.isidentifier()):
            raise section.error(name, f"invalid port name '{name}'",
                                fix="use letters, digits and '_', e.g. dist_init")
        ports[name] = section.number(name, RANGES["profile.ports"])
    if "http" not in ports:
        raise section.error(None, "ports has no http port", fix="add http: PORT")
    return ports


def _args(section: Section, fields: tuple[str, ...], options: OptionSet | None) -> RankArgs:
    """The per-rank argv templates, each placeholder and each option checked."""
    groups = {}
    for group in ARG_GROUPS:
        words = section.value(group, is_word_list, "a list of argv words", default=[])
        for word in words:
            problem = check_template(word, fields)
            if problem:
                raise section.error(group, f"args.{group}: {problem}",
                                    fix=allowed_fix("placeholders", [f"{{{f}}}" for f in fields],
                                                    "docs/formats.md#engine-profiles"))
            if options is not None and _OPTION_WORD.match(word) and not _NUMBER.match(word):
                wrong = options.problem(word)
                if wrong:
                    raise section.error(group, f"args.{group}: {wrong[0]}", fix=wrong[1])
                _refuse_settings_file(section, group, word, options, f"args.{group}: ")
        groups[group] = tuple(words)
    return RankArgs(**groups)


def _flag_roles(section: Section, options: OptionSet | None) -> FrozenMapping:
    """The flag_roles mapping: a role of FLAG_ROLES to the flag that carries it."""
    roles = {}
    for role in section:
        if role not in FLAG_ROLES:
            raise section.error(role, f"unknown flag role '{role}'{did_you_mean(role, FLAG_ROLES)}",
                                fix="roles: " + ", ".join(FLAG_ROLES))
        roles[role] = section.value(role, lambda v: isinstance(v, str) and bool(_FLAG.fullmatch(v)),
                                    "a flag such as --context-length")
        wrong = options.problem(roles[role]) if options is not None else None
        if wrong:
            raise section.error(role, f"flag_roles.{role}: {wrong[0]}", fix=wrong[1])
    return FrozenMapping(roles)


def _refuse_settings_file(section: Section, key: Any, flag: str, options: OptionSet | None,
                          label: str = "") -> None:
    """InventoryError at key when flag is an option that reads more options from a file."""
    name = flag.split("=", 1)[0]
    if options is not None and options.canonical(name) in SETTINGS_FILE_OPTIONS:
        raise section.error(key, f"{label}{name}: {options.engine} would read further options "
                            "from that file, where the rules (invoke check) cannot see them",
                            fix=f"write those settings as flags of the profile in {section.file}")


def _refuse_env_from_inventory(top: Section) -> None:
    """The environment an engine gets per node is no longer the profile's to say."""
    if "env_from_inventory" in top:
        raise top.error("env_from_inventory", "env_from_inventory is no longer read: each "
                        "node's env files, which provisioning writes, are the one source",
                        fix="remove it; engine variables go in "
                        "roles/engine_env/templates/<engine>.env.j2")


def _check_env_name(section: Section, var: Any) -> None:
    """InventoryError unless var is a valid environment variable name."""
    if not (isinstance(var, str) and _ENV.fullmatch(var)):
        raise section.error(var, f"invalid environment variable name '{var}'",
                            fix="use letters, digits and '_', not starting with a digit")


class _Resolver:
    """Reads the profiles of one file and applies `extends`, parents first."""

    def __init__(self, section: Section, reserved_flags: set[str], secret_env: set[str],
                 options: OptionSet | None = None):
        if not list(section):
            raise section.error(None, "no profiles defined", fix="add profiles: {NAME: {...}}")
        self.raw: dict[str, Section] = {}
        for name in section:
            if not is_name(name):
                raise section.error(name, f"invalid profile name '{name}'",
                                    fix="use letters, digits, '.', '_' and '-', e.g. 512k")
            self.raw[name] = section.section(name, _PROFILE_KEYS)
        self.reserved = reserved_flags
        self.secret_env = secret_env
        self.options = options
        self.merged: dict[str, dict[str, Any]] = {}

    def all(self) -> FrozenMapping:
        """Every profile of the file, by name, in file order."""
        return FrozenMapping({name: self._profile(name) for name in self.raw})

    def _profile(self, name: str) -> Profile:
        """One profile with its parents merged in and its settings complete."""
        section, merged = self.raw[name], self._merge(name, ())
        for key in ("ready_timeout_s", "stop_timeout_s"):
            if key not in merged:
                raise section.error(None, f"profile '{name}' has no {key}",
                                    fix=f"add {key}: SECONDS to it or to the profile it extends")
        experimental = merged.get("experimental", False)
        if experimental and "note" not in merged:
            raise section.error("experimental", f"profile '{name}' is experimental without a note",
                                fix="add note: <why it is experimental>")
        return Profile(
            name=name, description=section.value("description", is_line, "one line of text"),
            flags=FrozenMapping(merged["flags"]), env=FrozenMapping(merged["env"]),
            ready_timeout_s=merged["ready_timeout_s"], stop_timeout_s=merged["stop_timeout_s"],
            experimental=experimental, note=merged.get("note"), waivers=_waivers(section),
            model_path=merged.get("model_path"),
            stall_budget_s=merged.get("stall_budget_s", STALL_BUDGET_S))

    def _merge(self, name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        """The settings, flags and env of name over those of the profile it extends."""
        if name in self.merged:
            return self.merged[name]
        section = self.raw[name]
        base: dict[str, Any] = {"flags": {}, "env": {}}
        if "extends" in section:
            parent = section.value("extends", is_name, "a profile name")
            if parent not in self.raw:
                raise section.error("extends", f"profile '{name}' extends unknown profile "
                                    f"'{parent}'{did_you_mean(parent, self.raw)}",
                                    fix="profiles here: " + ", ".join(self.raw))
            if parent == name or parent in chain:
                loop = " -> ".join((*chain, name, parent))
                raise section.error("extends", f"extends loop: {loop}",
                                    fix="let one of them stand alone")
            base = self._merge(parent, (*chain, name))
        merged = {**base, **self._settings(section)}
        merged["flags"] = _overlay(base["flags"], self._flags(section), section, "flags")
        merged["env"] = _overlay(base["env"], self._env(section), section, "env")
        self.merged[name] = merged
        return merged

    @staticmethod
    def _settings(section: Section) -> dict[str, Any]:
        """The scalar settings a profile sets itself (inherited ones are not included)."""
        checks = {"experimental": (lambda v: isinstance(v, bool), "true or false"),
                  "note": (is_line, "one line of text"),
                  "model_path": (lambda v: isinstance(v, str) and abs_path_problem(v) is None,
                                 "an absolute path on the nodes, without ':', ',', whitespace, "
                                 "'.' or '..'")}
        numbers = {key: section.number(key, RANGES[f"profile.{key}"])
                   for key in ("ready_timeout_s", "stop_timeout_s", "stall_budget_s")
                   if key in section}
        return numbers | {key: section.value(key, check, expected)
                          for key, (check, expected) in checks.items() if key in section}

    def _flags(self, profile: Section) -> dict[str, Any]:
        """The flags a profile sets: value text, True for a switch, None to drop."""
        flags = profile.section("flags", required=False)
        result = {}
        for flag in flags:
            wrong = self.options.problem(flag) if self.options is not None and isinstance(
                flag, str) and flag.startswith("--") else None
            if wrong:
                raise flags.error(flag, wrong[0], fix=wrong[1])
            if isinstance(flag, str):
                _refuse_settings_file(flags, flag, flag, self.options)
            if not (isinstance(flag, str) and _FLAG.fullmatch(flag)):
                raise flags.error(flag, f"invalid flag '{flag}'",
                                  fix="write the flag in full, e.g. --context-length: 524288")
            taken = next((r for r in sorted(self.reserved) if r.startswith(flag)), None)
            if taken is not None:  # also an abbreviation of one, for an engine without a list
                raise flags.error(flag, f"{flag} is set per rank by this file's args"
                                  + ("" if taken == flag else f" (as {taken})"),
                                  fix="remove it from the profile")
            value = flags.raw(flag)
            if value is True or value is None:
                result[flag] = value
            else:
                result[flag] = _text(flags, flag, value, "true (a bare switch), null (drop an "
                                     "inherited flag) or " + _VALUE_HELP)
                if result[flag].startswith("-") and not _NUMBER.match(result[flag]):
                    raise flags.error(flag, f"{flag}: the value {result[flag]!r} would be read "
                                      "as an option", fix=f"write {flag}: <value>")
            wrong = (self.options.value_problem(flag, value)
                     if self.options is not None and value is not None else None)
            if wrong:
                raise flags.error(flag, wrong[0], fix=wrong[1])
        return result

    def _env(self, profile: Section) -> dict[str, Any]:
        """The env a profile sets: value text, None to drop."""
        env = profile.section("env", required=False)
        result = {}
        for var in env:
            _check_env_name(env, var)
            if var in self.secret_env:
                raise env.error(var, f"{var} is a secret", fix="set it in the operator's "
                                "environment; it is passed on from there, never from a file")
            value = env.raw(var)
            result[var] = None if value is None else _text(env, var, value, _VALUE_HELP)
        return result


def _waivers(profile: Section) -> FrozenMapping:
    """The rules a profile waives, each with the reason recorded for it; a bare id is refused."""
    waivers = profile.section("waivers", required=False)
    for rule in waivers:
        if not (isinstance(rule, str) and _RULE_ID.fullmatch(rule)):
            raise waivers.error(rule, f"invalid rule id '{rule}'",
                                fix="rule ids look like SM121-AUTOTUNE (invoke check --list)")
    return FrozenMapping({rule: waivers.value(rule, is_line, "the reason the rule is waived")
                          for rule in waivers})


def _text(section: Section, key: str, value: Any, expected: str) -> str:
    """A flag or env value as the exact text the engine gets (one line)."""
    if isinstance(value, str):
        if has_control(value):
            raise section.error(key, f"{key}: the value {describe(value)} holds a control "
                                "character (a newline, tab, ...)", fix="write it on one line")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise section.error(key, f"{key}: expected {expected}, got {describe(value)}",
                        fix=f"write {key}: '<value>'")


def _overlay(base: dict[str, Any], over: dict[str, Any], profile: Section,
             what: str) -> dict[str, Any]:
    """base updated by over in place order; a None in over drops an inherited key."""
    result = dict(base)
    for key, value in over.items():
        if value is not None:
            result[key] = value
        elif key in result:
            del result[key]
        else:
            raise profile.section(what).error(
                key, f"{key}: null drops an inherited setting, but none is inherited",
                fix="give it a value or remove the line")
    return result
