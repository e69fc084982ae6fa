"""`invoke monitoring.render`: the scrape config, its file_sd targets made from the inventory
(the watchdog's node, rank 0's engine ports, the api_port), the shipped rules and the
dashboard with Grafana's provisioning, no placeholder left; `promtool check config` accepts
the written directory; `--check` writes nothing and shows the diff. That a real Prometheus
scrapes the rehearsal rack with it and answers the dashboard: test_dashboard_rack.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hosttools import need
from provision_helpers import inventory_copy

from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory
from sparkrack.inventory.watchdog_record import WatchdogKey, write_record
from sparkrack.monitoring import KINDS, RenderOptions, TargetKind, render, write_files
from sparkrack.monitoring.render import RULE_FILES
from sparkrack.watchdog.metrics import WatchdogMetrics

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = REPO / "inventory" / "rehearsal"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0bVUb5QDEkHkq1c9Dq5Jm0fM8c1f1rQ0c7yq3Xh2f"


def targets(files: dict[str, str], job: str) -> list[dict]:
    return json.loads(files[f"prometheus/targets/{job}.json"])


def test_the_targets_come_from_the_inventory():
    files = render(load_inventory(REHEARSAL))
    assert targets(files, "sparkrack-watchdog") == [
        {"targets": ["10.77.1.11:9478"], "labels": {"rack": "rehearsal"}}]
    assert targets(files, "sparkrack-engine") == [  # rank 0, vLLM's port and SGLang's
        {"targets": ["10.77.1.11:8000"], "labels": {"rack": "rehearsal", "node": "spark-01"}},
        {"targets": ["10.77.1.11:30000"], "labels": {"rack": "rehearsal", "node": "spark-01"}}]
    config = yaml.safe_load(files["prometheus/prometheus.yml"])
    assert config["rule_files"] == list(RULE_FILES)
    assert [(j["job_name"], j["file_sd_configs"]) for j in config["scrape_configs"]] == [
        (kind.job, [{"files": [f"targets/{kind.job}.json"]}]) for kind in KINDS]
    assert not any(word in text for text in files.values()
                   for word in ("WATCHDOG_NODE", "HEAD_NODE", "PLACEHOLDER"))


def test_the_api_port_the_recorded_watchdog_and_on_move_the_targets(tmp_path):
    inventory = inventory_copy(REHEARSAL, tmp_path / "inv", api_port=8080,
                               watchdog_metrics_port=9500, rack_name="row-b")
    files = render(inventory)
    assert targets(files, "sparkrack-engine") == [  # one address whichever engine serves
        {"targets": ["10.77.1.11:8080"], "labels": {"rack": "row-b", "node": "spark-01"}}]
    write_record(inventory.path, WatchdogKey("spark-04", "/opt/sparkrack-watchdog", PUBLIC_KEY))
    assert targets(render(inventory), "sparkrack-watchdog")[0]["targets"] == ["10.77.1.14:9500"]
    moved = render(inventory, RenderOptions(watchdog_on="spark-06"))
    assert targets(moved, "sparkrack-watchdog")[0]["targets"] == ["10.77.1.16:9500"]


def test_no_target_label_hides_a_label_of_the_series():
    """A target label the scraped series also carry would be renamed exported_LABEL on the
    series: the watchdog's node and rank, vLLM's engine and model_name stay theirs."""
    series_labels = {"node", "rank", "state", "pdu", "outlet", "action", "outcome", "engine",
                     "profile", "image", "image_id", "deployment", "model_name"}
    registry = WatchdogMetrics().registry
    series_labels |= {label for family in registry.collect() for sample in family.samples
                      for label in sample.labels}
    files = render(load_inventory(REHEARSAL))
    for kind in KINDS:
        for group in targets(files, kind.job):
            assert not set(group["labels"]) & (series_labels - {"node"} if
                                               kind.job != "sparkrack-watchdog" else
                                               series_labels), (kind.job, group)


def test_a_kind_without_targets_has_no_job(monkeypatch):
    """The hook for a new kind (the fleet's router): an entry in KINDS; none found, no job."""
    module = sys.modules["sparkrack.monitoring.render"]
    router = TargetKind("sparkrack-router", "the fleet's router", lambda inventory, on: ())
    monkeypatch.setattr(module, "KINDS", (*KINDS, router))
    files = render(load_inventory(REHEARSAL))
    jobs = [j["job_name"] for j in yaml.safe_load(files["prometheus/prometheus.yml"])
            ["scrape_configs"]]
    assert jobs == ["sparkrack-watchdog", "sparkrack-engine"]
    assert "prometheus/targets/sparkrack-router.json" not in files


def test_every_shipped_rules_file_is_rendered():
    shipped = sorted(p.name for p in (REPO / "deploy" / "prometheus").glob("*.yml")
                     if not p.name.endswith(".test.yml"))
    assert sorted(RULE_FILES) == shipped, "add the rules file to RULE_FILES (render.py)"
    files = render(load_inventory(REHEARSAL))
    for name in RULE_FILES:
        assert files[f"prometheus/{name}"] == (REPO / "deploy" / "prometheus" / name).read_text()


def test_the_dashboard_is_provisioned_with_this_rack_chosen():
    files = render(load_inventory(REHEARSAL), RenderOptions(
        prometheus_url="http://prom.example:9090", dashboards_path="/srv/dashboards"))
    dashboard = json.loads(files["grafana/dashboards/sparkrack.json"])
    chosen = {v["name"]: v["current"] for v in dashboard["templating"]["list"]}
    assert chosen["rack"]["value"] == "rehearsal"
    source = yaml.safe_load(files["grafana/provisioning/datasources/sparkrack.yml"])
    assert source["datasources"][0]["url"] == "http://prom.example:9090"
    assert chosen["datasource"]["value"] == source["datasources"][0]["uid"]
    provider = yaml.safe_load(files["grafana/provisioning/dashboards/sparkrack.yml"])
    assert provider["providers"][0]["options"]["path"] == "/srv/dashboards"
    with pytest.raises(UsageError, match="--prometheus-url 'prom:9090' is not an http"):
        render(load_inventory(REHEARSAL), RenderOptions(prometheus_url="prom:9090"))
    with pytest.raises(UsageError, match="--dashboards-path 'dash' is not a plain absolute"):
        render(load_inventory(REHEARSAL), RenderOptions(dashboards_path="dash"))


def test_promtool_accepts_what_is_written(tmp_path):
    written = write_files(render(load_inventory(REHEARSAL)), tmp_path)
    assert {w.state for w in written} == {"new"}
    done = subprocess.run([need("promtool"), "check", "config", "prometheus.yml"],
                          cwd=tmp_path / "prometheus", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in done.stdout


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "monitoring.render", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "100"})


def test_the_task_writes_then_check_shows_the_diff_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    first = invoke("--out", str(out), "-i", "inventory/rehearsal")
    assert first.returncode == 0, first.stderr
    assert "monitoring.render: 8 of 8 files written" in first.stderr
    inventory = inventory_copy(REHEARSAL, tmp_path / "inv", watchdog_metrics_port=9500)
    checked = invoke("--out", str(out), "-i", str(inventory.path), "--check")
    assert checked.returncode == 0, checked.stderr
    assert '-      "10.77.1.11:9478"' in checked.stdout and '+      "10.77.1.11:9500"' in \
        checked.stdout
    assert "prometheus/targets/sparkrack-watchdog.json: changed (--check: not written)" in \
        checked.stderr
    assert "9478" in (out / "prometheus/targets/sparkrack-watchdog.json").read_text()
    again = invoke("--out", str(out), "-i", "inventory/rehearsal", "--json")
    assert {f["state"] for f in json.loads(again.stdout)["files"]} == {"same"}
    bad = invoke("--out", str(out), "-i", "inventory/rehearsal", "--on", "spark-99")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "spark-99" in bad.stderr and "Traceback" not in bad.stderr


def test_a_fleets_router_is_scraped_when_a_fleet_file_names_it():
    plain = render(load_inventory(REHEARSAL))
    assert "prometheus/targets/sparkrack-router.json" not in plain
    files = render(load_inventory(REHEARSAL), RenderOptions(router_metrics="10.77.1.254:29000",
                                                          fleet="rehearsal"))
    assert targets(files, "sparkrack-router") == [
        {"targets": ["10.77.1.254:29000"], "labels": {"fleet": "rehearsal"}}]
    jobs = yaml.safe_load(files["prometheus/prometheus.yml"].split("\n", 3)[3])["scrape_configs"]
    assert "sparkrack-router" in [job["job_name"] for job in jobs]
    dashboard = json.loads(files["grafana/dashboards/sparkrack.json"])
    picked = {v["name"]: v["current"].get("value") for v in dashboard["templating"]["list"]}
    assert (picked["rack"], picked["fleet"]) == ("rehearsal", "rehearsal")
    assert "value" not in {v["name"]: v["current"] for v in json.loads(
        plain["grafana/dashboards/sparkrack.json"])["templating"]["list"]}["fleet"]
