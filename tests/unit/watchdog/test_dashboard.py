"""deploy/grafana/sparkrack.json: a Grafana dashboard over a Prometheus datasource variable
whose queries name only metrics that exist: the watchdog's (exported by sparkrack) and the
engines' (vLLM's and SGLang's name for the same measure, side by side). That each query
answers is proved on the rack (tests/integration/test_dashboard_rack.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_watchdog_prometheus import exported_names

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = json.loads((REPO / "deploy" / "grafana" / "sparkrack.json").read_text())
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
EXPRS = [t["expr"] for p in PANELS for t in p["targets"]]


def test_every_panel_asks_the_datasource_variable():
    variable = DASHBOARD["templating"]["list"][0]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource", "datasource", "prometheus")
    for panel in PANELS:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["datasource"] == panel["datasource"]
                                        for t in panel["targets"])
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)) and DASHBOARD["schemaVersion"] >= 39


def test_the_issue_s_measures_each_have_a_panel():
    titles = {p["title"] for p in PANELS}
    assert {"GPU power", "SM clock", "GPU temperature", "Strip draw against budget",
            "Group state", "Stalls", "Tokens/s", "Time to first token",
            "Inter-token latency"} <= titles


def test_every_sparkrack_metric_a_query_names_is_exported():
    used = {name for expr in EXPRS for name in re.findall(r"\bsparkrack_[a-z0-9_]+", expr)}
    assert used and used <= exported_names()


def test_every_engine_query_names_both_engines():
    for expr in EXPRS:
        for names in re.findall(r'__name__=~"([^"]+)"', expr):
            engines = sorted(name.split(":")[0] for name in names.split("|"))
            assert engines == ["sglang", "vllm"], expr
