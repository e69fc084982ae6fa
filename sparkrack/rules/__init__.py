"""Safety rules for engine profiles on this hardware (SM121, unified memory, TP8 over RoCE).

Each rule has an id, a severity (error blocks a start, warning does not), a one-line
message, and an explanation quoting its evidence. Rules are data (sparkrack/data/rules.yml,
read by ruleset.py) evaluated by a small engine (data_checks.py) where they can be, and named
code checks (code_checks.py) where they need arithmetic, cross-references or node facts. `check_profile`
runs them on the launch specs a profile would start; a profile waives a rule only with a
reason (`waivers:` in its engine file), and a waived finding never blocks.

- check.py: `check_profile(inventory, engine, profile, *, node_kernels=None, specs=None)`
  (`check_lane(inventory, lane, ...)`: a lane resolved already, engines/lane.py);
- findings.py: `CheckReport` (`.errors`, `.warnings`, `.waived`, `.blocking`) of `Finding`s;
- explain.py: `explain(rule_id)`; ruleset.py: `all_rules()`, `get_rule(rule_id)`.
"""

from sparkrack.rules.check import check_lane, check_profile
from sparkrack.rules.explain import explain
from sparkrack.rules.findings import ERROR, WARNING, CheckReport, Finding
from sparkrack.rules.rule import Rule
from sparkrack.rules.ruleset import all_rules, get_rule

__all__ = ["ERROR", "WARNING", "CheckReport", "Finding", "Rule", "all_rules", "check_lane",
           "check_profile", "explain", "get_rule"]
