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


def fleet_panels() -> list[dict]:
    """The panels under the router's row: the fleet's, not a rack's."""
    titles = [p["title"] for p in DASHBOARD["panels"]]
    row = next(i for i, p in enumerate(DASHBOARD["panels"])
               if p["type"] == "row" and p["title"].startswith("The fleet's router"))
    after = DASHBOARD["panels"][row + 1:]
    assert all(p["type"] != "row" for p in after), titles  # the router's row comes last
    return after


def test_every_query_is_of_the_chosen_rack_or_of_the_chosen_fleet():
    """A `rack` variable (the label monitoring.render puts on every rack target): every
    selector of every query asks that rack's series only. The one exception: the router's
    row, whose series carry `fleet` (monitoring.render --fleet labels the router's target
    with the fleet's name; a router serves several racks): each of its selectors asks the
    `fleet` variable's fleet and SMG's own smg_* series, and no other panel does. These
    fleet-only queries are the ones test_dashboard_rack.py leaves to test_fleet_rack.py."""
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    for name, job in (("rack", 'job=~"sparkrack-.*"'), ("fleet", 'job="sparkrack-router"')):
        variable = variables[name]
        assert variable["type"] == "query" and variable["query"] == \
            f"label_values(up{{{job}}}, {name})", variable
    fleet = [p["id"] for p in fleet_panels()]
    assert len(fleet) >= 3
    for panel in PANELS:
        for expr in (t["expr"] for t in panel["targets"]):
            selectors = re.findall(r"(?:(?:sparkrack|smg)_[a-z0-9_]+)?\{[^}]*\}"
                                   r"|\b(?:sparkrack|smg)_[a-z0-9_]+\b(?!\{)", expr)
            label, metric = ('fleet="$fleet"', "smg_") if panel["id"] in fleet else \
                ('rack="$rack"', "")
            assert selectors and all(label in s and s.startswith(metric) for s in selectors), \
                (panel["title"], expr)
            assert ("$fleet" in expr) == (panel["id"] in fleet), (panel["title"], expr)


def test_the_router_s_request_rate_errors_and_heads_have_panels():
    """What SMG 1.13.0 exports (smg launch's /metrics, read on loopback in
    tests/unit/racks/test_router.py): routed requests, failed ones by error type, and each
    registered head's health and in-flight count."""
    used = {name for p in fleet_panels() for t in p["targets"]
            for name in re.findall(r"\bsmg_[a-z0-9_]+", t["expr"])}
    assert used == {"smg_router_requests_total", "smg_http_responses_total",
                    "smg_router_request_errors_total", "smg_worker_health",
                    "smg_worker_cb_state", "smg_worker_requests_active"}


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
