"""`invoke check --explain RULE`: a rule's message, what it checks, why, and its evidence."""

from __future__ import annotations

import textwrap

from sparkrack.rules.ruleset import get_rule

WIDTH = 88


def explain(rule_id: str) -> str:
    """The explanation of a rule with its evidence quoted; UsageError for an unknown id."""
    rule = get_rule(rule_id)
    applies = "; ".join(filter(None, (", ".join(rule.engines), rule.when.describe())))
    lines = [f"{rule.id} ({rule.severity}): {rule.message}", "",
             f"Applies to: {applies}", f"Checks: {rule.check.describe()}", "",
             *_wrap(rule.explanation, ""), "", "Evidence:"]
    for item in rule.evidence:
        lines.append(f"  {item.source}, \"{item.section}\":")
        lines += _wrap(f"\"{item.quote}\"", "    ")
    lines += ["", f"A profile may waive it, with a reason: waivers: {{{rule.id}: \"why\"}}"]
    return "\n".join(lines)


def _wrap(text: str, indent: str) -> list[str]:
    """text as lines of at most WIDTH, never broken inside a word or a flag."""
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)
