"""A rule as data: what it checks (a data check or a named code check), when it applies,
and the explanation with the evidence behind it. ruleset.py reads them from rules.yml."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkrack.engines import ModelData
from sparkrack.engines.option_names import version_key
from sparkrack.inventory.schema import FrozenMapping, yaml_text

RANK_KINDS = ("flag_present", "flag_at_most", "flag_in", "flag_not_in", "env_at_most")
MODEL_KEYS = ("name", "quantization", "dsa")  # ModelData attributes a condition may name


@dataclass(frozen=True)
class Evidence:
    """A quote from a source that establishes a rule."""

    source: str  # file, as a path from the repo root
    section: str  # heading in that file
    quote: str  # verbatim (line breaks aside)


@dataclass(frozen=True)
class Condition:
    """When a rule applies: model data values, and flag values on the rank's argv."""

    model: FrozenMapping  # MODEL_KEYS attribute -> required value
    flags: FrozenMapping  # flag -> tuple of values; the rank must give one of them

    def matches_model(self, model: ModelData) -> bool:
        """Whether the model has every value the condition asks for."""
        return all(getattr(model, key) == value for key, value in self.model.items())

    def matches_flags(self, flags: Mapping[str, str | bool]) -> bool:
        """Whether a rank's flags give one of the listed values for every listed flag."""
        return all(flags.get(flag) in values for flag, values in self.flags.items())

    def describe(self) -> str:
        """The condition in words, '' when the rule always applies."""
        parts = [f"model {key}: {yaml_text(value)}" for key, value in self.model.items()]
        parts += [f"{flag} in {', '.join(values)}" for flag, values in self.flags.items()]
        return "; ".join(parts)


@dataclass(frozen=True)
class DataCheck:
    """A check evaluated from data: one of RANK_KINDS, per rank."""

    kind: str
    subject: str  # the flag or env var
    limit: float | None  # for *_at_most
    values: tuple[str, ...]  # for *_in / *_not_in

    def describe(self) -> str:
        """What the check demands, in words."""
        listed = ", ".join(self.values)
        limit = f"{self.limit:,g}" if self.limit is not None else ""
        return {
            "flag_present": f"every rank's argv has {self.subject}",
            "flag_at_most": f"{self.subject}, when given, is at most {limit}",
            "flag_in": f"{self.subject}, when given, is one of {listed}",
            "flag_not_in": f"{self.subject}, when given, is none of {listed}",
            "env_at_most": f"every rank's env sets {self.subject} to at most {limit}",
        }[self.kind]


@dataclass(frozen=True)
class CodeCheck:
    """A check that needs arithmetic or cross-references: a function of code_checks.py."""

    name: str

    def describe(self) -> str:
        """Where the check is written."""
        return f"code: sparkrack/rules/code_checks.py, {self.name}"


@dataclass(frozen=True)
class LaunchFlags:
    """The flags one engine takes for its place in the TP group, as the launch rules read them."""

    tp_size: str
    nnodes: str
    node_rank: str
    rendezvous: str  # the head's address every rank joins
    rendezvous_port: bool  # whether the rendezvous value is HOST:PORT
    http_host: str  # where rank 0's API listens
    http_host_default: str  # what the engine binds when the flag is absent


@dataclass(frozen=True)
class Rule:
    """One safety rule: id, severity, where it applies, what it checks and why."""

    id: str
    severity: str
    engines: tuple[str, ...]
    message: str
    explanation: str
    evidence: tuple[Evidence, ...]
    when: Condition
    check: DataCheck | CodeCheck
    verified_on: FrozenMapping = field(default_factory=lambda: FrozenMapping({}))
    # engine -> ((low, high), ...): the engine versions the rule was read from and proven on

    def verified(self, engine: str, version: str) -> bool:
        """Whether version of engine lies in one of the rule's verified ranges."""
        key = version_key(version)
        return any(low == "any" or version_key(low) <= key <= version_key(high)
                   for low, high in self.verified_on.get(engine, ()))

    def verified_text(self, engine: str) -> str:
        """'0.5.18 - 0.5.22, 0.5.24' (the ranges as written), or 'none'."""
        ranges = self.verified_on.get(engine, ())
        return ", ".join(low if low == high else f"{low} - {high}"
                         for low, high in ranges) or "none"
