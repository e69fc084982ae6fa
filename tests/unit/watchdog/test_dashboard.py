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


def test_every_query_is_of_the_chosen_rack():
    """A `rack` variable (the label monitoring.render puts on every target): every selector
    of every query asks that rack's series only."""
    rack = next(v for v in DASHBOARD["templating"]["list"] if v["name"] == "rack")
    assert rack["type"] == "query" and "label_values(" in rack["query"] and \
        rack["query"].endswith(", rack)")
    for expr in EXPRS:
        selectors = re.findall(
            r"(?:sparkrack_[a-z0-9_]+)?\{[^}]*\}|\bsparkrack_[a-z0-9_]+\b(?!\{)", expr)
        assert selectors and all('rack="$rack"' in s for s in selectors), expr


def test_grafanas_own_library_reads_every_key_of_the_dashboard():
    """Grafana's foundation SDK (Grafana 11.6's types, each panel's options and each query
    decoded by its plugin's model) reads the dashboard back and writes it again: a key it
    drops is one Grafana does not know (a misspelt option, an obsolete field)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel
    from grafana_foundation_sdk.models.prometheus import Dataquery

    from sparkrack.inventory import load_inventory
    from sparkrack.monitoring import render

    register_default_plugins()
    rendered = json.loads(render(load_inventory(REPO / "inventory" / "rehearsal"))
                          ["grafana/dashboards/sparkrack.json"])
    for dashboard in (DASHBOARD, rendered):  # as shipped, and as monitoring.render writes it
        model = Dashboard.from_json(dashboard)
        assert all(isinstance(t, Dataquery) for p in model.panels if isinstance(p, Panel)
                   and p.targets for t in p.targets)
        again = json.loads(json.dumps(model, cls=JSONEncoder))
        dropped = list(dropped_keys(dashboard, again))
        assert not dropped, f"Grafana's model drops {dropped}"


def dropped_keys(given, read, where=""):
    """Every path of a key in given that read lacks (read: given through a model)."""
    if isinstance(given, dict) and isinstance(read, dict):
        for key, value in given.items():
            if key not in read:
                yield f"{where}/{key}"
            else:
                yield from dropped_keys(value, read[key], f"{where}/{key}")
    elif isinstance(given, list) and isinstance(read, list):
        assert len(given) == len(read), where
        for index, (one, other) in enumerate(zip(given, read, strict=True)):
            yield from dropped_keys(one, other, f"{where}[{index}]")
