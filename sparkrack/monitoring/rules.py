"""The shipped alert rules (deploy/prometheus/): which files Prometheus loads, and which of
their groups need the engines' own metrics only, so that a Kubernetes lane, where no
watchdog runs, gets those (export's PrometheusRule). A new rules file is one entry in
RULE_FILES (docs/watchdog.md#monitoring-from-the-inventory).
"""

from __future__ import annotations

import re

import yaml

from sparkrack.data import shipped

RULE_FILES = ("sparkrack-alerts.yml", "sparkrack-nccl-alerts.yml")  # deploy/prometheus/: each loaded by Prometheus
_WATCHDOG = re.compile(r"\bsparkrack_[a-z0-9_]+|sparkrack-watchdog")


def rules_text(name: str) -> str:
    """A shipped rules file, as it is."""
    return (shipped("deploy") / "prometheus" / name).read_text()


def engine_groups() -> list[dict]:
    """The groups of every rules file whose expressions name no metric of the watchdog's
    (sparkrack_*) and not its job: they hold wherever the engines' metrics are scraped."""
    groups = [group for name in RULE_FILES
              for group in yaml.safe_load(rules_text(name))["groups"]]
    return [group for group in groups
            if not any(_WATCHDOG.search(str(rule["expr"])) for rule in group["rules"])]
