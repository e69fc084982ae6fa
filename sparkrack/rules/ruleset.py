"""The rule set: sparkrack/data/rules.yml (package data), read into Rules and checked
(InventoryError at file:line for any mistake); `all_rules`, `get_rule` and `launch_flags`
look it up. The format: docs/formats.md#the-rules-file.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields
from pathlib import Path

from sparkrack import data
from sparkrack.core.errors import UsageError, allowed_fix
from sparkrack.engines.datafile import (
    Section,
    did_you_mean,
    is_number,
    is_text,
    is_text_list,
    read_section,
)
from sparkrack.inventory.schema import ENGINES, FrozenMapping
from sparkrack.rules.code_checks import CODE_CHECKS
from sparkrack.rules.findings import SEVERITIES
from sparkrack.rules.rule import (
    MODEL_KEYS,
    RANK_KINDS,
    CodeCheck,
    Condition,
    DataCheck,
    Evidence,
    LaunchFlags,
    Rule,
)

RULES_FILE = data.shipped("rules.yml")
_RULE_ID = re.compile(r"[A-Z0-9][A-Z0-9-]*")
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RULE_KEYS = ("severity", "engines", "when", "check", "message", "explanation", "evidence",
              "verified_on")
ANY = "any"  # verified_on value of a rule that does not depend on the engine's version
_VERSION = re.compile(r"\d+(\.\d+)*((rc|a|b|\.post|\.dev)\d+)?(\+[a-z0-9.]+)?")
_CHECK_KEYS = (*RANK_KINDS, "code", "max", "values")
_LAUNCH_KEYS = tuple(f.name for f in fields(LaunchFlags))


@dataclass(frozen=True)
class RuleSet:
    """A rules file, read: its rules in file order and the launch flags per engine."""

    rules: tuple[Rule, ...]
    launch_flags: FrozenMapping  # engine -> LaunchFlags


def all_rules() -> tuple[Rule, ...]:
    """Every shipped rule, in the order of rules.yml."""
    return shipped().rules


def get_rule(rule_id: str) -> Rule:
    """The shipped rule with this id; UsageError naming the ids if there is none."""
    rules = {rule.id: rule for rule in all_rules()}
    if rule_id not in rules:
        raise UsageError(f"unknown rule '{rule_id}'{did_you_mean(rule_id, rules)}",
                         fix=allowed_fix("rules", rules, "`invoke check --list`"))
    return rules[rule_id]


def launch_flags(engine: str) -> LaunchFlags | None:
    """The launch flags of engine, None when the rule set has none for it."""
    return shipped().launch_flags.get(engine)


@functools.cache
def shipped() -> RuleSet:
    """The shipped rules file, read once."""
    return read_rules_file(RULES_FILE)


def read_rules_file(file: Path) -> RuleSet:
    """One rules file, read and checked."""
    top = read_section(file, ("sources", "launch_flags", "verified_on", "rules"))
    default = _verified_on(top.section("verified_on", required=False))
    sources = top.section("sources")
    paths = {name: sources.value(name, is_text, "a path from the repo root") for name in sources}
    flags = top.section("launch_flags")
    rules_section = top.section("rules")
    rules = []
    for rule_id in rules_section:
        if not (isinstance(rule_id, str) and _RULE_ID.fullmatch(rule_id)):
            raise rules_section.error(rule_id, f"invalid rule id '{rule_id}'",
                                      fix="use capitals, digits and '-', e.g. SM121-AUTOTUNE")
        rules.append(_rule(rule_id, rules_section.section(rule_id, _RULE_KEYS), paths, default))
    return RuleSet(tuple(rules), FrozenMapping(
        {engine: _launch_flags(flags.section(engine, _LAUNCH_KEYS)) for engine in flags}))


def _launch_flags(section: Section) -> LaunchFlags:
    """One engine's launch flags."""
    def flag(key: str) -> str:
        return section.value(key, _is_flag, "a flag such as --tp-size")
    return LaunchFlags(
        tp_size=flag("tp_size"), nnodes=flag("nnodes"), node_rank=flag("node_rank"),
        rendezvous=flag("rendezvous"),
        rendezvous_port=section.value("rendezvous_port", _is_bool, "true or false"),
        http_host=flag("http_host"),
        http_host_default=section.value("http_host_default", is_text, "an address"))


def _verified_on(section: Section) -> FrozenMapping:
    """{engine: ((low, high), ...)} of a verified_on mapping: per engine a version, a range
    'LOW - HIGH' (both included), a list of those, or `any` (the rule does not depend on
    the engine's version)."""
    found = {}
    for engine in section:
        if engine not in ENGINES:
            raise section.error(engine, f"unknown engine '{engine}'"
                                f"{did_you_mean(engine, ENGINES)}",
                                fix="engines: " + ", ".join(ENGINES))
        value = section.value(engine, lambda v: _ranges(v) is not None,
                              "a version, 'LOW - HIGH', a list of those, or any")
        found[engine] = _ranges(value)
    return FrozenMapping(found)


def _ranges(value: object) -> tuple[tuple[str, str], ...] | None:
    """The ranges a verified_on value names, or None when it is not one."""
    if value == ANY:
        return ((ANY, ANY),)
    items = value if isinstance(value, list) and value else [value]
    ranges = []
    for item in items:
        if not isinstance(item, str):
            return None
        low, _, high = (part.strip() for part in item.partition(" - "))
        high = high or low
        if not (_VERSION.fullmatch(low) and _VERSION.fullmatch(high)):
            return None
        ranges.append((low, high))
    return tuple(ranges)


def _rule(rule_id: str, section: Section, sources: dict[str, str],
          default: FrozenMapping) -> Rule:
    """One rule entry (verified_on: its own, else the file's)."""
    check = _check(section.section("check", _CHECK_KEYS))
    when = _condition(section.section("when", ("model", "flags"), required=False))
    if when.flags and not (isinstance(check, DataCheck) and check.kind in RANK_KINDS):
        raise section.error("when", f"{rule_id}: when.flags applies to per-rank data checks only",
                            fix="drop when.flags, or test the flag inside the code check")
    return Rule(
        id=rule_id,
        severity=section.value("severity", lambda v: v in SEVERITIES, " or ".join(SEVERITIES)),
        engines=tuple(section.value("engines", lambda v: is_text_list(v) and bool(v)
                                    and set(v) <= set(ENGINES),
                                    "a list of engines: " + ", ".join(ENGINES))),
        message=section.value("message", is_text, "one line"),
        explanation=section.value("explanation", is_text, "a paragraph"),
        evidence=_evidence(section, sources),
        when=when, check=check,
        verified_on=_verified_on(section.section("verified_on")) if "verified_on" in section
        else default)


def _check(section: Section) -> DataCheck | CodeCheck:
    """The check of a rule: exactly one kind key, with max or values as the kind needs."""
    kinds = [key for key in section if key not in ("max", "values")]
    if len(kinds) != 1:
        raise section.error(None, f"check: expected one kind, got {len(kinds)}",
                            fix="kinds: " + ", ".join((*RANK_KINDS, "code")))
    kind = kinds[0]
    if kind == "code":
        return CodeCheck(section.value("code", lambda v: isinstance(v, str) and v in CODE_CHECKS,
                                       "one of " + ", ".join(CODE_CHECKS)))
    needs = {"max": kind.endswith("_at_most"), "values": kind in ("flag_in", "flag_not_in")}
    for key, needed in needs.items():
        if (key in section) != needed:
            raise section.error(key if key in section else kind,
                                f"check {kind} {'needs' if needed else 'takes no'} {key}",
                                fix=f"see the check kinds in {__name__}")
    subject = section.value(kind, _is_env if kind.startswith("env_") else _is_flag,
                            "a variable name" if kind.startswith("env_") else "a flag")
    limit = section.value("max", is_number, "a number", default=None)
    values = section.value("values", lambda v: is_text_list(v) and bool(v), "a list of values",
                           default=[])
    return DataCheck(kind, subject, None if limit is None else float(limit), tuple(values))


def _condition(section: Section) -> Condition:
    """A rule's `when`: model values and flag values."""
    model = section.section("model", MODEL_KEYS, required=False)
    flags = section.section("flags", required=False)
    for flag in flags:
        if not _is_flag(flag):
            raise flags.error(flag, f"invalid flag '{flag}'", fix="write it in full, e.g. --foo")
    return Condition(
        model=FrozenMapping({key: model.value(key, lambda v: is_text(v) or isinstance(v, bool),
                                              "a value such as true or nvfp4") for key in model}),
        flags=FrozenMapping({flag: tuple(flags.value(flag, is_text_list, "a list of values"))
                             for flag in flags}))


def _evidence(section: Section, sources: dict[str, str]) -> tuple[Evidence, ...]:
    """A rule's evidence: at least one quote, each from a known source."""
    items = section.value("evidence", lambda v: isinstance(v, list) and bool(v),
                          "a list of {source, section, quote}")
    evidence = []
    for item in items:
        entry = Section(item, section.file, section.line_of("evidence"), "evidence",
                        ("source", "section", "quote"))
        source = entry.value("source", lambda v: isinstance(v, str) and v in sources,
                             "one of " + ", ".join(sources))
        evidence.append(Evidence(sources[source], entry.value("section", is_text, "a heading"),
                                 entry.value("quote", is_text, "the verbatim text")))
    return tuple(evidence)


def _is_flag(value: object) -> bool:
    """Whether value is a long flag such as --tp-size."""
    return isinstance(value, str) and bool(_FLAG.fullmatch(value))


def _is_env(value: object) -> bool:
    """Whether value is an environment variable name."""
    return isinstance(value, str) and bool(_ENV.fullmatch(value))


def _is_bool(value: object) -> bool:
    """Whether value is true or false."""
    return isinstance(value, bool)
