"""What each rank's NCCL uses, as the watchdog service exports it (issue 56, item 1) and a
port gone down under it while serving (item 4): the head's NCCL record and the nodes'
ports read in one round trip, the metrics a scrape shows, the finding said once, and the
shipped alerts (`promtool check rules`, `promtool test rules`)."""

from __future__ import annotations

import base64
import json
import logging
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from fakerack import FakeRack, deployment, make, metric, ranks_of
from hosttools import need

from sparkrack.facts import records as record_facts
from sparkrack.facts.roce import roce_query
from sparkrack.watchdog.railwatch import RETRY_WINDOW_S

REPO = Path(__file__).resolve().parents[3]
PROMETHEUS = REPO / "deploy" / "prometheus"
ACTIVE, DOWN = "4: ACTIVE", "1: DOWN"
BOTH = ["rocep1s0f0", "roceP2p1s0f0"]


@dataclass
class Answers:
    """A node's answers as the gather script gives them: its HCAs' ports, the head's record."""

    ports: dict[str, str]
    record: dict | None = None

    def lines(self, query) -> list[str]:
        if query == record_facts.nccl_query():
            data = json.dumps(self.record).encode() if self.record else None
            return ["missing"] if data is None else [
                f"stat file|644|root|root|{len(data)}|0",
                f"content {base64.b64encode(data).decode()}"]
        hca = next((h for h in BOTH if query == roce_query(h)), None)
        state = self.ports.get(hca)
        return [] if state is None else ["present", f"state {state}"]

    def get(self, query):
        """query's fact, read by its own kind (as the real Answers does)."""
        return query.kind.read(self.lines(query), query)


@dataclass
class RailRack(FakeRack):
    """The fakes' rack with the NCCL record of d1's start and each node's ports."""

    ports: dict[str, dict[str, str]] = field(default_factory=dict)
    uses: dict[int, list[str]] = field(default_factory=dict)  # rank -> HCAs; [] on TCP
    asked: list[dict] = field(default_factory=list)

    def ask(self, queries):
        self.asked.append(queries)
        record = {"deployment": "d1", "allowed": True, "ranks": [
            {"rank": rank, "node": node, "said": True, "degraded": len(hcas) < 2,
             "network": "IB" if hcas else "Socket", "hcas": [f"{h}:1" for h in hcas],
             "uses": "..."} for rank, node in enumerate(("spark-01", "spark-02", "spark-03"))
            for hcas in [self.uses.get(rank, BOTH)]]}
        return {node: Answers(self.ports.get(node, dict.fromkeys(BOTH, ACTIVE)),
                              record if node == "spark-01" else None)
                for node in queries}


def test_the_rails_each_rank_uses_are_exported_and_a_port_gone_down_is_said_once(caplog):
    current = deployment("d1")
    rack = RailRack(current=current, last_good=current, containers=ranks_of("d1"),
                    uses={2: ["rocep1s0f0"]})  # rank 2 started on one rail
    watchdog = make(rack)
    watchdog.rails.every = 0  # read at every step here
    caplog.set_level(logging.INFO, logger="sparkrack.watchdog")
    assert watchdog.step().verdict == "guarding"
    assert rack.asked[0]["spark-01"][-1] == record_facts.nccl_query()  # the head: its record
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-01", rank="0") == 2
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-03", rank="2") == 1
    assert metric(watchdog, "sparkrack_nccl_expected_rails", node="spark-03", rank="2") == 2
    assert metric(watchdog, "sparkrack_nccl_socket", node="spark-03", rank="2") == 0
    assert metric(watchdog, "sparkrack_nccl_port_up", node="spark-02", hca="roceP2p1s0f0") == 1
    assert not [r for r in caplog.records if "port went down" in r.getMessage()]

    rack.ports["spark-02"] = {"rocep1s0f0": ACTIVE, "roceP2p1s0f0": DOWN}  # a cable out
    watchdog.step()
    watchdog.step()
    said = [r.getMessage() for r in caplog.records if "port went down" in r.getMessage()]
    assert said == [
        "spark-02: roceP2p1s0f0's port went down (1: DOWN) under rank 1's NCCL: NCCL 2.27.7 "
        "only warns (`NET/IB : roceP2p1s0f0:1 Got async error event: port error`); its "
        f"connections on that rail fail once the HCA's retries are spent (about "
        f"{RETRY_WINDOW_S:.0f} s at NCCL_IB_TIMEOUT 20, NCCL_IB_RETRY_CNT 7) and the group with "
        "them; started again, NCCL runs on 1 of 2 rails (rocep1s0f0), which `invoke up` "
        "refuses without --allow-degraded: reseat the cable (`invoke run --limit spark-02 -- "
        "ibdev2netdev` shows the ports)"]  # said once while it stands
    assert RETRY_WINDOW_S == 4.096e-6 * 2 ** 20 * 8
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-02", rank="1") == 1
    assert metric(watchdog, "sparkrack_nccl_port_up", node="spark-02", hca="roceP2p1s0f0") == 0

    rack.ports["spark-02"] = dict.fromkeys(BOTH, ACTIVE)
    watchdog.step()
    assert "spark-02: roceP2p1s0f0's port is up again" in [r.getMessage() for r in caplog.records]
    rack.uses = {0: [], 1: BOTH, 2: BOTH}  # the next start: rank 0 on TCP
    watchdog.step()
    assert metric(watchdog, "sparkrack_nccl_socket", node="spark-01", rank="0") == 1
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-01", rank="0") == 0

    rack.current = None  # `down`: no deployment, no series
    watchdog.step()
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-01", rank="0") is None


def test_a_rack_the_service_cannot_ask_exports_nothing_of_nccl():
    current = deployment("d1")
    watchdog = make(FakeRack(current=current, last_good=current, containers=ranks_of("d1")))
    assert watchdog.step().verdict == "guarding"
    assert metric(watchdog, "sparkrack_nccl_rails", node="spark-01", rank="0") is None


def exported() -> set[str]:
    current = deployment("d1")
    watchdog = make(RailRack(current=current, last_good=current, containers=ranks_of("d1")))
    watchdog.step()
    from prometheus_client import generate_latest
    return set(re.findall(r"^(sparkrack_nccl_[a-z_]+)", generate_latest(
        watchdog.metrics.registry).decode(), re.M))


def test_the_nccl_alerts_use_exported_metrics_and_the_watchdog_page_names_them():
    rules = yaml.safe_load((PROMETHEUS / "sparkrack-nccl-alerts.yml").read_text())
    used = {name for group in rules["groups"] for rule in group["rules"]
            for name in re.findall(r"\bsparkrack_[a-z0-9_]+", rule["expr"])}
    names = exported()
    assert used and used <= names
    page = (REPO / "docs" / "watchdog.md").read_text()
    assert [name for name in sorted(names) if f"`{name}`" not in page] == []
    assert all(f"`{rule['alert']}`" in page for group in rules["groups"]
               for rule in group["rules"])


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need("promtool"), *args], cwd=PROMETHEUS, capture_output=True,
                          text=True, timeout=60)


def test_promtool_accepts_the_nccl_alerts_and_they_fire_on_synthetic_series():
    """SparkrackNcclDegraded (a rank on fewer rails, not on TCP) after its minute, and
    SparkrackNcclOnTcp: sparkrack-nccl-alerts.test.yml."""
    done = promtool("check", "rules", "sparkrack-nccl-alerts.yml")
    assert done.returncode == 0 and "SUCCESS: 2 rules found" in done.stdout, done.stdout
    done = promtool("test", "rules", "sparkrack-nccl-alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_nccl_alerts_fire_on_the_series_the_service_exports(tmp_path):
    """The service's own exposition, not hand-written series: rank 2 started on one rail and
    rank 0 on TCP, as a scrape reads them every 15 s for 3 minutes. promtool fires
    SparkrackNcclDegraded for rank 2 alone and SparkrackNcclOnTcp for rank 0 alone, with
    the labels and the text an operator reads."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    current = deployment("d1")
    watchdog = make(RailRack(current=current, last_good=current, containers=ranks_of("d1"),
                             uses={0: [], 2: ["rocep1s0f0"]}))
    watchdog.step()
    scraped = {"job": "sparkrack-watchdog", "instance": "spark-01:9478"}
    series = [{"series": sample.name + "{" + ",".join(
                   f'{k}="{v}"' for k, v in sorted({**sample.labels, **scraped}.items())) + "}",
               "values": f"{sample.value:g}x12"}
              for family in text_string_to_metric_families(
                  generate_latest(watchdog.metrics.registry).decode())
              for sample in family.samples if sample.name.startswith("sparkrack_nccl_")]
    assert len(series) == 3 * 3 + 3 * 2  # rails, expected, socket a rank; each node's ports
    rules = {rule["alert"]: rule for group in yaml.safe_load(
        (PROMETHEUS / "sparkrack-nccl-alerts.yml").read_text())["groups"]
        for rule in group["rules"]}

    def fired(alert: str, node: str, rank: str, value: str) -> dict:
        def text(template: str) -> str:
            return (template.replace("{{ $labels.rank }}", rank)
                    .replace("{{ $labels.node }}", node).replace("{{ $value }}", value))
        return {"exp_labels": {**scraped, "node": node, "rank": rank,
                               **rules[alert]["labels"]},
                "exp_annotations": {k: text(v) for k, v in rules[alert]["annotations"].items()}}

    (tmp_path / "exported.test.yml").write_text(yaml.safe_dump({
        "rule_files": [str(PROMETHEUS / "sparkrack-nccl-alerts.yml")],
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series, "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SparkrackNcclDegraded",
             "exp_alerts": [fired("SparkrackNcclDegraded", "spark-03", "2", "1")]},
            {"eval_time": "2m", "alertname": "SparkrackNcclOnTcp",
             "exp_alerts": [fired("SparkrackNcclOnTcp", "spark-01", "0", "1")]}]}]}))
    done = subprocess.run([need("promtool"), "test", "rules", "exported.test.yml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
