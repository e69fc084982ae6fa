"""`invoke check`: the safety rules against an engine profile's launch specs; contacts no node.

Exit codes: 0 when the profile may start (warnings and waived findings allowed), 1 when a
blocking finding refuses it, 2 for a usage or inventory error (as every task).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.cli.serve_tasks import DEFAULT_PROFILE
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = None

if TYPE_CHECKING:
    from sparkrack.rules import Finding

BLOCKED_EXIT = 1


@task(help={"engine": "sglang or vllm (a profile: the inventory's overrides, else shipped)",
            "profile": f"profile name (default: {DEFAULT_PROFILE})",
            "inventory": INVENTORY_HELP,
            "explain": "print one rule's explanation and evidence, e.g. SM121-AUTOTUNE",
            "list": "list every rule: id, severity, engines, message",
            "json": "print JSON for scripts"})
@operator_task
def check(c, engine=None, profile=DEFAULT_PROFILE, inventory=None, explain=None, list_=False,
          json=False):
    """Check a profile against the SM121 rules; exit 1 on a blocking finding.

    Host kernels and cabling are not checked here (no node facts); `up` and `roll` check
    them (cabling: `provision` too)."""
    from sparkrack.rules import check_profile
    from sparkrack.rules import explain as explain_rule

    if explain:
        print(explain_rule(explain))
        return
    if list_:
        _list_rules(json)
        return
    if not engine:
        raise UsageError("no engine given", fix="pass --engine sglang or --engine vllm, "
                         "or --list / --explain RULE")
    report = check_profile(inventory_from(inventory), engine, profile)
    if json:
        console.print_json(report.as_dict())
    else:
        console.print_table(
            f"check {engine} {profile}", ["severity", "rule", "where", "finding"],
            [[_severity(f), f.rule, f.where(report.node_count) or "rack",
              f.message + (f" [waived: {f.waiver_reason}]" if f.waived else "")]
             for f in report.findings],
            styles=[None, "bold"])
        console.say(f"flags checked against {report.checked_against}")
        for note in report.notes:
            console.say(f"note: {note}")
    if report.blocking:
        raise Exit(f"refused: {report.summary()}", code=BLOCKED_EXIT)
    console.say(report.summary())


def _severity(finding: Finding) -> str:
    """The severity column: 'waived' replaces the severity of a waived finding."""
    return f"{finding.severity} (waived)" if finding.waived else finding.severity


def _list_rules(json: bool) -> None:
    """Every rule as a table, or as JSON."""
    from sparkrack.rules import all_rules

    rules = all_rules()
    if json:
        console.print_json([{"id": r.id, "severity": r.severity, "engines": list(r.engines),
                             "message": r.message} for r in rules])
        return
    console.print_table("rules", ["rule", "severity", "engines", "message"],
                        [[r.id, r.severity, ", ".join(r.engines), r.message] for r in rules],
                        styles=["bold"])
