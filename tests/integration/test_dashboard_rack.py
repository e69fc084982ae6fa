"""The dashboard against the rehearsal rack (issue 47, item 4; issue 57, item 3): every query
of deploy/grafana/sparkrack.json answers, so no panel is empty, from what
`invoke monitoring.render` writes. The router's row alone asks a fleet's router, which a
rack without a fleet does not have: test_fleet_rack.py asks those queries of a real
Prometheus scraping the fleet's router.

The watchdog runs as the operator of a rack with a switched PDU installs it (`invoke
watch.install --allow-power-cycle`, on the head: only then does it hold the PDU's keys and
export the strip's draw that two panels show); a real
Prometheus (Debian's) on 127.0.0.1 runs on `invoke monitoring.render`'s output as written:
its config, its file_sd targets made from the inventory (the watchdog on the head, rank 0's
engine ports) and its rules, nothing edited. Each engine in turn serves a steady load, then
every panel's expression (the rack variable set to the inventory's rack_name) is asked
through Prometheus's HTTP API and must return at least one series.

Run: python -m pytest -q -n 0 tests/integration/test_dashboard_rack.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from freeport import free_port
from hosttools import need
from localproc import running
from test_watchdog_rack import Prometheus, wait_for

from sparkrack.deployments.headapi import Endpoint
from sparkrack.lifecycle import lanes

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
RACK = "rehearsal"  # the inventory's rack_name: the rack variable's value
# Grafana's own variables and the dashboard's, as Grafana fills them in before it asks
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$rack": RACK}


FLEET_ROW = "The fleet's router"  # the row whose panels are a fleet's, not a rack's


def dashboard_queries(path: Path, variables: dict | None = None,
                      fleet: bool = False) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every rack panel (fleet: of every panel of
    the router's row, the last row, whose series carry `fleet` instead of `rack`: only a
    fleet's router has them; test_fleet_rack.py asks those), the variables filled in."""
    found, in_fleet_row = [], False
    for panel in json.loads(path.read_text())["panels"]:
        if panel["type"] == "row":
            in_fleet_row = panel["title"].startswith(FLEET_ROW)
        for target in panel.get("targets", []) if in_fleet_row == fleet else []:
            expr = target["expr"]
            for name, value in (variables or GRAFANA_VARIABLES).items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
            found.append((panel["title"], expr))
    return found


def invoke(*args, timeout=600) -> subprocess.CompletedProcess:
    """The invoke CLI from the repo against the rehearsal inventory, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", "inventory/rehearsal"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1"}, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def watchdog(inventory):
    """The watchdog service on the head with the PDU's keys (`invoke watch.install
    --allow-power-cycle`), uninstalled at the end."""
    try:
        done = invoke("watch.install", "--allow-power-cycle")
        assert done.returncode == 0, done.stdout + done.stderr
        yield inventory.head
    finally:
        gone = invoke("watch.uninstall")
    assert gone.returncode == 0, gone.stdout + gone.stderr


@pytest.fixture(scope="module")
def rendered(watchdog, tmp_path_factory) -> Path:
    """`invoke monitoring.render --out DIR`: what the operator copies to Prometheus."""
    out = tmp_path_factory.mktemp("monitoring")
    done = invoke("monitoring.render", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def prometheus(rendered):
    """Debian's prometheus on 127.0.0.1 with monitoring.render's config, rules and targets,
    as written (its paths are relative to prometheus.yml)."""
    server_path = need("prometheus")
    folder = rendered / "prometheus"
    port = free_port()
    with running([server_path, f"--config.file={folder / 'prometheus.yml'}",
                  f"--storage.tsdb.path={rendered / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                 rendered / "prometheus.log") as process:
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
def test_every_dashboard_query_answers_while_the_group_serves(engine_rack, rendered, prometheus,
                                                              engine, port):
    inventory = engine_rack
    queries = dashboard_queries(rendered / "grafana" / "dashboards" / "sparkrack.json")
    assert len(queries) >= 20, queries
    lanes.down(inventory)
    try:
        lanes.up(inventory, engine, "512k")
        load = Load(Endpoint(inventory.head, port, "GLM-5.3"))
        try:
            prometheus.wait(f'sparkrack_watchdog_guarding{{rack="{RACK}"}}', lambda v: v == 1,
                            timeout=60)
            wait_for("answers", lambda: load.answered >= 3, 60)
            deadline = time.monotonic() + 60  # a rate needs two scrapes of a moved counter
            while empty := [f"{title}: {expr}" for title, expr in queries
                            if not prometheus.query(expr)]:
                assert time.monotonic() < deadline, f"{engine}: empty panels: {empty}"
                time.sleep(2)
            up = {(r["metric"]["job"], r["metric"]["instance"]): r["value"][1]
                  for r in prometheus.query(f'up{{rack="{RACK}"}}')}
            assert up[("sparkrack-watchdog", f"{inventory.head.address}:9478")] == "1", up
            assert up[("sparkrack-engine", f"{inventory.head.address}:{port}")] == "1", up
            p95 = prometheus.value(queries[-1][1])
            print(f"\n{engine}: {len(queries)} dashboard queries answered; inter-token "
                  f"latency p95 {p95:.3f} s; targets up: {sorted(up.items())}")
            assert 0 < p95 < 1
        finally:
            load.stop()
    finally:
        lanes.down(inventory)
