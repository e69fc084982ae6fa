"""The dashboard against the rehearsal rack (issue 47, item 4): every query of
deploy/grafana/sparkrack.json answers, so no panel is empty.

The watchdog runs on this machine (`python -m sparkrack.watchdog`, metrics on 127.0.0.1);
a real Prometheus (Debian's) on 127.0.0.1 scrapes it and rank 0's engine metrics with
deploy/prometheus/prometheus.yml, its placeholders pointed at the rack, every second. Each
engine in turn serves a steady load, then every panel's expression is asked through
Prometheus's HTTP API and must return at least one series.

Run: python -m pytest -q -n 0 tests/integration/test_dashboard_rack.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from hosttools import need
from localproc import running
from stubgroup import quick_burn
from test_watchdog_rack import Prometheus, free_port, wait_for

from sparkrack.deployments.headapi import Endpoint
from sparkrack.lifecycle import lanes

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "sparkrack.json"
# Grafana's own variables, as it fills them in before it asks Prometheus
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, Grafana's variables filled in."""
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
            found.append((panel["title"], expr))
    return found


@pytest.fixture(scope="module")
def watchdog(inventory, tmp_path_factory):
    """The watchdog service on this machine, its metrics on 127.0.0.1: ADDR:PORT."""
    folder = tmp_path_factory.mktemp("watchdog")
    port = free_port()
    with running([sys.executable, "-m", "sparkrack.watchdog", "--inventory", str(inventory.path),
                  "--listen", f"127.0.0.1:{port}", "--state", str(folder / "state.json")],
                 folder / "watchdog.log", cwd=REPO, env={**os.environ, "SPARKRACK_SANDBOX": "1"}):
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def prometheus(inventory, watchdog, tmp_path_factory):
    """Debian's prometheus on 127.0.0.1 with the shipped scrape config and alert rules, its
    placeholders pointed at the watchdog above and the rack's head, scraping every second."""
    server_path = need("prometheus")
    folder = tmp_path_factory.mktemp("prometheus")
    config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(REPO / "deploy" / "prometheus" / name)
                            for name in config["rule_files"]]
    places = {"WATCHDOG_NODE:9478": watchdog, "HEAD_NODE": inventory.head.address}
    for job in config["scrape_configs"]:
        job.update(scrape_interval="1s", scrape_timeout="1s")
        for group in job["static_configs"]:
            targets = []
            for target in group["targets"]:
                for placeholder, value in places.items():
                    target = target.replace(placeholder, value)
                targets.append(target)
            group["targets"] = targets
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with running([server_path, f"--config.file={folder / 'prometheus.yml'}",
                  f"--storage.tsdb.path={folder / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                 folder / "prometheus.log") as process:
        server = Prometheus(f"http://127.0.0.1:{port}")
        wait_for("prometheus ready", lambda: process.poll() is None and server.query("up"), 60)
        yield server


class Load:
    """Chat requests to rank 0, one after another, until stopped."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint, self.done, self.answered = endpoint, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                self.endpoint.chat([{"role": "user", "content": "word " * 20}], 20, timeout=60)
                self.answered += 1
            except Exception:  # noqa: BLE001 - the group going down under it
                self.done.wait(0.2)

    def stop(self):
        self.done.set()
        self.thread.join(70)


@pytest.mark.parametrize("engine,port", [("vllm", 8000), ("sglang", 30000)])
def test_every_dashboard_query_answers_while_the_group_serves(engine_rack, prometheus, engine,
                                                              port):
    inventory = engine_rack
    queries = dashboard_queries()
    assert len(queries) >= 20, queries
    lanes.down(inventory)
    try:
        lanes.up(inventory, engine, "512k", burn=quick_burn)
        load = Load(Endpoint(inventory.head, port, "GLM-5.3"))
        try:
            prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
            wait_for("answers", lambda: load.answered >= 3, 60)
            deadline = time.monotonic() + 60  # a rate needs two scrapes of a moved counter
            while empty := [f"{title}: {expr}" for title, expr in queries
                            if not prometheus.query(expr)]:
                assert time.monotonic() < deadline, f"{engine}: empty panels: {empty}"
                time.sleep(2)
            p95 = prometheus.value(queries[-1][1])
            print(f"\n{engine}: {len(queries)} dashboard queries answered; inter-token "
                  f"latency p95 {p95:.3f} s")
            assert 0 < p95 < 1
        finally:
            load.stop()
    finally:
        lanes.down(inventory)
