"""The files Prometheus and Grafana read for a rack, made from its inventory, as
{relative path: text} (`render`), and their writing (`write_files`: atomic, or with
`check` only the diff). Under the output directory:

    prometheus/prometheus.yml        the scrape config: one job per kind of target
    prometheus/targets/JOB.json      each job's file_sd targets (Prometheus rereads them)
    prometheus/RULES.yml             the shipped alert rules, each of RULE_FILES
    grafana/dashboards/*.json        the shipped dashboard, this rack chosen
    grafana/provisioning/...         Grafana's datasource and dashboard provider

A new rules file is one entry in rules.RULE_FILES; a new kind of target one in targets.KINDS
(docs/watchdog.md#monitoring-from-the-inventory).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from sparkrack.core.atomic import write_atomically
from sparkrack.core.errors import UsageError
from sparkrack.data import shipped
from sparkrack.inventory import Inventory
from sparkrack.monitoring.rules import RULE_FILES, rules_text
from sparkrack.monitoring.targets import KINDS, ROUTER, router_groups

DASHBOARDS = ("sparkrack.json",)  # deploy/grafana/
DATASOURCE_NAME = "sparkrack-prometheus"  # Grafana's datasource, and its uid
EVALUATION_S = 15
_URL = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~/-]*)?")
_PATH = re.compile(r"/[A-Za-z0-9._/-]*")


@dataclass(frozen=True)
class RenderOptions:
    """What the inventory does not say: where the watchdog runs (None: where watch.install
    recorded it, else the head), where Grafana reaches Prometheus, and the folder on
    Grafana's machine its dashboard provider reads."""

    watchdog_on: str | None = None
    prometheus_url: str = "http://localhost:9090"
    dashboards_path: str = "/var/lib/grafana/dashboards/sparkrack"
    router_metrics: str | None = None  # the fleet's router's ADDRESS:PORT (a fleet file's)
    fleet: str = ""  # that fleet's name

    def check(self) -> None:
        """UsageError naming the flag when a value cannot be what it says."""
        if not _URL.fullmatch(self.prometheus_url):
            raise UsageError(f"--prometheus-url {self.prometheus_url!r} is not an http(s) URL",
                             fix="e.g. --prometheus-url http://localhost:9090")
        if not _PATH.fullmatch(self.dashboards_path) or "/../" in f"{self.dashboards_path}/":
            raise UsageError(f"--dashboards-path {self.dashboards_path!r} is not a plain "
                             "absolute path", fix="e.g. /var/lib/grafana/dashboards/sparkrack")


def render(inventory: Inventory, options: RenderOptions = RenderOptions()) -> dict[str, str]:
    """Every file, by its path under the output directory."""
    options.check()
    files: dict[str, str] = {}
    jobs = []
    for kind in (*KINDS, ROUTER):
        groups = (router_groups(options.router_metrics, options.fleet)
                  if kind is ROUTER and options.router_metrics
                  else kind.groups(inventory, options.watchdog_on))
        if not groups:
            continue
        target_file = f"targets/{kind.job}.json"
        files[f"prometheus/{target_file}"] = json.dumps(
            [group.as_dict() for group in groups], indent=2) + "\n"
        jobs.append({"job_name": kind.job, "scrape_interval": f"{kind.interval_s}s",
                     "scrape_timeout": f"{kind.timeout_s}s", "metrics_path": kind.path,
                     "file_sd_configs": [{"files": [target_file]}]})
    config = {"global": {"scrape_interval": "15s", "evaluation_interval": f"{EVALUATION_S}s"},
              "rule_files": list(RULE_FILES), "scrape_configs": jobs}
    files["prometheus/prometheus.yml"] = (
        f"# sparkrack's scrape config for rack {inventory.vars.rack_name}, written by "
        "`invoke monitoring.render` from\n# its inventory: render again after the inventory "
        "changes (docs/watchdog.md#monitoring-from-the-inventory).\n"
        "# Paths are relative to this file.\n" + _yaml(config))
    for name in RULE_FILES:
        files[f"prometheus/{name}"] = rules_text(name)
    for name in DASHBOARDS:
        dashboard = json.loads((shipped("deploy") / "grafana" / name).read_text())
        files[f"grafana/dashboards/{name}"] = json.dumps(
            chosen(dashboard, inventory.vars.rack_name, options.fleet), indent=2) + "\n"
    files["grafana/provisioning/datasources/sparkrack.yml"] = _yaml({
        "apiVersion": 1,
        "datasources": [{"name": DATASOURCE_NAME, "uid": DATASOURCE_NAME, "type": "prometheus",
                         "access": "proxy", "url": options.prometheus_url, "isDefault": False,
                         "jsonData": {"timeInterval": f"{min(k.interval_s for k in KINDS)}s"}}]})
    files["grafana/provisioning/dashboards/sparkrack.yml"] = _yaml({
        "apiVersion": 1,
        "providers": [{"name": "sparkrack", "type": "file", "folder": "sparkrack",
                       "disableDeletion": False, "allowUiUpdates": False,
                       "updateIntervalSeconds": 30,
                       "options": {"path": options.dashboards_path}}]})
    return files


def chosen(dashboard: dict, rack: str, fleet: str = "") -> dict:
    """The dashboard with its variables' first choice made: the provisioned datasource, this
    rack and, when a fleet file was given, its fleet (each can be changed in Grafana)."""
    result = json.loads(json.dumps(dashboard))
    picks = {"datasource": (DATASOURCE_NAME, DATASOURCE_NAME), "rack": (rack, rack),
             **({"fleet": (fleet, fleet)} if fleet else {})}
    for variable in result["templating"]["list"]:
        if variable["name"] in picks:
            text, value = picks[variable["name"]]
            variable["current"] = {"selected": True, "text": text, "value": value}
    return result


@dataclass(frozen=True)
class Written:
    """One file of a render under the output directory: new, changed or the same, and
    (for a changed one) the unified diff from what was there."""

    path: str
    state: str
    diff: str = ""


def write_files(files: dict[str, str], out: Path, check: bool = False) -> list[Written]:
    """Write each new or changed file under out, atomically (check: write nothing); one
    Written per file, in path order."""
    done = []
    for name in sorted(files):
        path = out / name
        old = path.read_text() if path.is_file() else None
        if old == files[name]:
            done.append(Written(name, "same"))
            continue
        diff = "" if old is None else "".join(difflib.unified_diff(
            old.splitlines(keepends=True), files[name].splitlines(keepends=True),
            f"{path} (now)", f"{path} (rendered)"))
        if not check:
            write_atomically(path, files[name])
        done.append(Written(name, "new" if old is None else "changed", diff))
    return done


def _yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
