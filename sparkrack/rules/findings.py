"""What a rule check found: Findings (one per rule and problem, with the nodes it concerns)
gathered in a CheckReport that says whether the start is blocked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkrack.inventory.schema import FrozenMapping

ERROR = "error"  # blocks a start unless the profile waives the rule
WARNING = "warning"  # shown, never blocks
SEVERITIES = (ERROR, WARNING)


@dataclass(frozen=True)
class Finding:
    """One problem a rule found; nodes/ranks empty when it concerns no node in particular."""

    rule: str
    severity: str
    message: str
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()  # the rank of each node in nodes
    waived: bool = False
    waiver_reason: str | None = None

    @property
    def blocking(self) -> bool:
        """Whether this finding refuses a start: an error that the profile does not waive."""
        return self.severity == ERROR and not self.waived

    def where(self, node_count: int) -> str:
        """The nodes concerned in words: '', 'all ranks' or 'spark-03 (rank 2), ...'."""
        if node_count and len(self.nodes) == node_count:
            return "all ranks"
        return ", ".join(f"{node} (rank {rank})" for node, rank in zip(self.nodes, self.ranks, strict=False))

    def as_dict(self) -> dict[str, Any]:
        """The finding as plain JSON-ready data."""
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "nodes": list(self.nodes), "ranks": list(self.ranks), "waived": self.waived,
                "waiver_reason": self.waiver_reason, "blocking": self.blocking}


@dataclass(frozen=True)
class CheckReport:
    """Every finding of the rules for one engine profile, and what was not checked (notes)."""

    engine: str
    profile: str
    node_count: int
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]  # rules skipped and why, unused waivers
    waivers: FrozenMapping  # rule id -> reason, as the profile records them
    checked_against: str = ""  # the option table the flags were checked against (a line)
    engine_version: str | None = None  # the version the image runs, when known
    unverified: tuple[str, ...] = ()  # rules whose verified_on does not cover that version

    @property
    def errors(self) -> tuple[Finding, ...]:
        """Findings of severity error, waived or not."""
        return tuple(f for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Findings of severity warning, waived or not."""
        return tuple(f for f in self.findings if f.severity == WARNING)

    @property
    def waived(self) -> tuple[Finding, ...]:
        """Findings that a waiver of the profile lets pass."""
        return tuple(f for f in self.findings if f.waived)

    @property
    def blocking(self) -> tuple[Finding, ...]:
        """The findings that refuse a start (unwaived errors); empty when it may start."""
        return tuple(f for f in self.findings if f.blocking)

    def summary(self) -> str:
        """One line for the operator, naming the blocking rules if any."""
        counts = (f"{len(self.errors)} error(s), {len(self.warnings)} warning(s), "
                  f"{len(self.waived)} waived")
        if self.blocking:
            rules = ", ".join(dict.fromkeys(f.rule for f in self.blocking))
            return f"{self.engine} {self.profile}: blocked by {rules} ({counts})"
        return f"{self.engine} {self.profile}: may start ({counts})"

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data (also what a deployment log records)."""
        return {"engine": self.engine, "profile": self.profile,
                "blocking": bool(self.blocking), "summary": self.summary(),
                "findings": [f.as_dict() for f in self.findings], "notes": list(self.notes),
                "waivers": dict(self.waivers), "checked_against": self.checked_against,
                "engine_version": self.engine_version, "unverified_rules": list(self.unverified)}
