"""The small engine that evaluates data checks (rule.DataCheck) on each rank's argv and env."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sparkrack.rules.argv import number
from sparkrack.rules.rule import DataCheck, Rule
from sparkrack.rules.target import Hit, Target


def run_data_check(rule: Rule, target: Target) -> Iterator[Hit]:
    """The problems rule's data check finds, per rank whose flags meet rule.when."""
    check = rule.check
    for spec in target.specs:
        flags = target.flags(spec)
        if rule.when.matches_flags(flags):
            problem = _rank_problem(check, flags, spec.env)
            if problem:
                yield Hit.on(spec, problem)


def _rank_problem(check: DataCheck, flags: Mapping[str, str | bool],
                 env: Mapping[str, str]) -> str | None:
    """What one rank's flags and env break of a per-rank check, or None."""
    name = check.subject
    if check.kind == "env_at_most":
        if name not in env:
            return f"{name} is not set"
        return _above(f"{name}={env[name]}", env[name], check.limit)
    if check.kind == "flag_present":
        return None if name in flags else f"{name} is missing"
    if name not in flags:
        return None  # the engine's default applies; the rule names only given values
    value = flags[name]
    shown = f"{name} {value}" if isinstance(value, str) else f"{name} (without a value)"
    if check.kind == "flag_at_most":
        return _above(shown, value, check.limit)
    if check.kind == "flag_in":
        return None if value in check.values else f"{shown} is not one of {', '.join(check.values)}"
    return f"{shown} is given" if value in check.values else None  # flag_not_in


def _above(shown: str, value: str | bool, limit: float) -> str | None:
    """'shown is above limit', 'shown is not a number', or None when value <= limit."""
    amount = number(value)
    if amount is None:
        return f"{shown} is not a number"
    return f"{shown} is above {limit:,g}" if amount > limit else None

