"""For prometheus-operator users (`invoke export --prometheus-operator`): a PodMonitor that
scrapes the lane's leader, the one pod that serves the engine's /metrics, as
monitoring.render's `sparkrack-engine` job does on a rack, and a PrometheusRule with the
shipped alert groups that need only the engines' own metrics (no watchdog runs in a
cluster). Both carry the labels the operator's Prometheus selects them by (`--monitor-label`)
(docs/kubernetes.md#prometheus-operator).
"""

from __future__ import annotations

from typing import Any

from sparkrack.core.errors import UsageError
from sparkrack.export.cluster import ClusterOptions, is_label
from sparkrack.monitoring.rules import engine_groups
from sparkrack.monitoring.targets import KINDS

API_VERSION = "monitoring.coreos.com/v1"
RULES_NAME = "sparkrack-engine-alerts"


def monitor_labels(texts: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` flags as labels; UsageError naming the flag for one the API refuses."""
    found = {}
    for text in texts:
        key, equals, value = text.partition("=")
        if not (equals and is_label(key, value)):
            raise UsageError(f"--monitor-label {text!r} is not a label KEY=VALUE",
                             fix="the label your Prometheus selects monitors and rules by, "
                             "e.g. --monitor-label release=kube-prometheus-stack")
        found[key] = value
    return found


def export_monitors(name: str, selector: dict[str, str], lane_labels: dict[str, str],
                    rack: str, cluster: ClusterOptions,
                    extra_labels: dict[str, str]) -> tuple[dict[str, Any], ...]:
    """The PodMonitor of the lane's leader (selector: the pods its Service selects) and the
    PrometheusRule, labelled with lane_labels and extra_labels; every series gets
    rack=<rack_name>, as monitoring.render's targets do, for the dashboard's rack variable."""
    engine = next(kind for kind in KINDS if kind.job == "sparkrack-engine")
    monitor = {
        "apiVersion": API_VERSION, "kind": "PodMonitor",
        "metadata": {"name": name, **cluster.metadata(),
                     "labels": {**lane_labels, **extra_labels}},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "podMetricsEndpoints": [{
                "port": "http", "path": engine.path, "interval": f"{engine.interval_s}s",
                "scrapeTimeout": f"{engine.timeout_s}s",
                "relabelings": [{"action": "replace", "targetLabel": "rack",
                                 "replacement": rack}]}],
        },
    }
    rules = {
        "apiVersion": API_VERSION, "kind": "PrometheusRule",
        "metadata": {"name": RULES_NAME, **cluster.metadata(),
                     "labels": {"app.kubernetes.io/part-of": "sparkrack", **extra_labels}},
        "spec": {"groups": engine_groups()},
    }
    return monitor, rules
