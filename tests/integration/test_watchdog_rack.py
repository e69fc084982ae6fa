"""The watchdog as a service on the rehearsal rack (issue 13, part 4): `invoke watch.install`
puts it on spark-01 under the node's real systemd; a real Prometheus (Debian's package) on
this machine scrapes it every second and the tests read the values back through
Prometheus's HTTP API.

- a rank killed on a worker: the service stops the whole group within 5 s (from the kill
  to every rank exited, by polling docker inspect) and `sparkrack_watchdog_actions_total
  {action="stop"}` goes up in Prometheus;
- the service's node rebooted: the service is active again after boot and guards the
  next `up`;
- while a group serves under load (issue 47): a GPU whose clock lock is reset
  (`nvidia-smi -rgc`) has its cap re-applied by the service, checked and audited; a latched
  GPU and a heated one are reported, each in Prometheus;
- while a group serves (issue 56): a port of spark-03's nccl_ib_hca taken down is said in
  the service's journal with what NCCL does now, Prometheus shows rank 2 on one rail and
  its alert pending, `invoke status` shows it, and `fabric.check` names the rail as
  carrying nothing; back up, both rails again;
- installed with --allow-power-cycle: the head, where the watchdog runs, latched under load
  is power-cycled through the rehearsal PDU; the service started again after the boot
  finishes the cycle and the group serves again (issue 53); a worker's host wedged (its
  processes frozen, its outlet drawing) is named wedged, power-cycled, and the group serves
  again (issue 56);
- `watch.uninstall` leaves nothing: no unit, no install directory, no state, no key line
  in any node's authorized_keys, no key record.

Run (the tests run in file order; the last one uninstalls):
    python -m pytest -q -p no:cacheprovider tests/integration/test_watchdog_rack.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from freeport import free_port
from hosttools import need
from localproc import running

from sparkrack.deployments.record import RECORD_DIR
from sparkrack.deployments.record import read as read_records
from sparkrack.engines import build_specs
from sparkrack.fleet import Fleet, sh
from sparkrack.inventory.watchdog_dir import MARKER_FILE, MARKER_TEXT
from sparkrack.inventory.watchdog_record import MARKER, read_record
from sparkrack.lifecycle import lanes
from sparkrack.monitoring.rules import RULE_FILES
from sparkrack.watchdog.gpuwatch import THERMAL_MARGIN_C
from sparkrack.watchdog.settings import DEFAULT_INSTALL_DIR, STATE_DIR, UNIT

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
WATCHDOG_NODE = "spark-01"
STOP_WITHIN_S = 5.0
LEFTOVERS = (f"/etc/systemd/system/{UNIT}", f"/etc/systemd/system/multi-user.target.wants/{UNIT}",
             DEFAULT_INSTALL_DIR, STATE_DIR)


def invoke(*args, timeout=600) -> subprocess.CompletedProcess:
    """The invoke CLI from the repo, as an operator runs it (the lock and audit included)."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "SPARKRACK_SANDBOX": "1"})


def on_watchdog_node(inventory, argv, timeout=30):
    with Fleet(inventory, inventory.select(WATCHDOG_NODE)) as fleet:
        return fleet.run(argv, timeout=timeout)[WATCHDOG_NODE]


def unit_property(inventory, name: str) -> str:
    result = on_watchdog_node(inventory, ["systemctl", "show", "-p", name, "--value", UNIT])
    return result.stdout.strip() if result.ok else f"error: {result.error}"


def wait_for(what: str, probe, timeout: float, interval: float = 0.5):
    """probe() until it returns something truthy; its last value in the failure message."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as error:  # a node rebooting, Prometheus starting: try again
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:g} s (last: {last!r})")


# --- Prometheus -------------------------------------------------------------------------------


class Prometheus:
    """A Prometheus server of our own, asked through its HTTP API (/api/v1/query)."""

    def __init__(self, url: str):
        self.url = url

    def query(self, expr: str) -> list[dict]:
        query = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as answer:
            data = json.load(answer)
        assert data["status"] == "success", data
        return data["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The one value expr has now (None: no series)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait(self, expr: str, good, timeout: float = 30.0) -> float | None:
        """The value of expr once good(value) holds."""
        found = {}

        def probe():
            found["value"] = self.value(expr)
            return good(found["value"])

        wait_for(f"Prometheus: {expr}", probe, timeout)
        return found["value"]




@pytest.fixture(scope="module")
def prometheus(inventory, tmp_path_factory):
    """Debian's prometheus on 127.0.0.1, scraping the watchdog on spark-01 every second and
    evaluating every shipped rules file (temporary config and storage); stopped at the end."""
    prometheus_server = need("prometheus")
    folder = tmp_path_factory.mktemp("prometheus")
    target = f"{inventory.node(WATCHDOG_NODE).address}:{inventory.vars.watchdog_metrics_port}"
    rule_files = "\n".join(f"  - {REPO / 'deploy' / 'prometheus' / name}" for name in RULE_FILES)
    (folder / "prometheus.yml").write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
{rule_files}
scrape_configs:
  - job_name: sparkrack-watchdog
    static_configs:
      - targets: ["{target}"]
""")
    port = free_port()
    with running([prometheus_server, f"--config.file={folder / 'prometheus.yml'}",
                  f"--storage.tsdb.path={folder / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                 folder / "prometheus.log") as process:
        server = Prometheus(f"http://127.0.0.1:{port}")

        def ready():
            if process.poll() is not None:
                pytest.fail(f"prometheus exited {process.returncode}: "
                            f"{(folder / 'prometheus.log').read_text()[-2000:]}")
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as answer:
                return answer.status == 200

        wait_for("prometheus ready", ready, 60)
        yield server


# --- The service ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(inventory):
    """`invoke watch.install --on spark-01`, proved running, idempotent; uninstalled at the
    end whatever happened (uninstall is idempotent: after the last test it finds nothing)."""
    try:
        system = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE,
                        "--install-dir", "/usr")  # issue 23 item 2: refused before any change
        assert system.returncode == 2 and "--install-dir /usr: a top-level directory" in \
            system.stderr, system.stdout + system.stderr
        done = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "serving http://10.77.1.11:9478/metrics" in done.stderr, done.stderr
        assert unit_property(inventory, "ActiveState") == "active"
        assert unit_property(inventory, "UnitFileState") == "enabled"
        assert unit_property(inventory, "Restart") == "always"
        record = read_record(inventory.path)
        assert record is not None and record.node == WATCHDOG_NODE
        assert record.sources == (inventory.node(WATCHDOG_NODE).address,)
        with Fleet(inventory) as fleet:  # authorized on every node, from spark-01 only
            lines = fleet.run(sh('grep -- "$1" "$2"', MARKER,
                                 inventory.vars.ssh_authorized_keys_file))
        assert lines.all_ok and {r.stdout for r in lines} == {
            f'restrict,from="10.77.1.11" {record.public_key} {MARKER}\n'}
        again = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "up to date; nothing changed" in again.stderr, again.stderr
        journal = on_watchdog_node(inventory, ["journalctl", "-u", UNIT, "-b", "--no-pager",
                                               "-o", "cat"])
        # on the node's management address only (issue 23 item 7), not every interface
        assert "metrics on http://10.77.1.11:9478/metrics" in journal.stdout, journal.stdout[-2000:]
        marker = on_watchdog_node(inventory, ["cat", f"{DEFAULT_INSTALL_DIR}/{MARKER_FILE}"])
        assert marker.ok and marker.stdout == MARKER_TEXT  # issue 23 item 2
        yield inventory
    finally:
        gone = invoke("watch.uninstall", "-i", "inventory/rehearsal")
    assert gone.returncode == 0, gone.stdout + gone.stderr  # (when nothing above failed)


def watch_status() -> dict:
    done = invoke("watch.status", "-i", "inventory/rehearsal", "--json", timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_a_killed_rank_is_stopped_by_the_service_within_5_s(engine_rack, installed, prometheus):
    inventory = engine_rack
    lanes.down(inventory)
    stop = 'sparkrack_watchdog_actions_total{action="stop"}'
    try:
        before = prometheus.wait(stop, lambda v: v is not None, timeout=30)  # scraped
        deployment = lanes.up(inventory, "sglang", "512k")
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=30)
        assert prometheus.value("sparkrack_group_ranks_running") == 8
        specs = build_specs(inventory, "sglang", "512k")
        victim = next(spec for spec in specs if spec.rank == 3)
        assert victim.node == "spark-04"
        with Fleet(inventory) as fleet:
            clients = {spec.node: fleet.docker_client(spec.node) for spec in specs}
            running = {}
            killed = time.monotonic()
            clients[victim.node].containers.get(victim.container_name).kill()
            while True:
                running = {spec.rank: clients[spec.node].api.inspect_container(
                    spec.container_name)["State"]["Running"] for spec in specs}
                if not any(running.values()):
                    stopped = time.monotonic()
                    break
                if time.monotonic() - killed > 60:
                    pytest.fail(f"ranks still running 60 s after the kill: {running}")
                time.sleep(0.05)
        elapsed = stopped - killed
        detection = prometheus.wait("sparkrack_watchdog_detection_to_stopped_seconds",
                                    lambda v: v is not None, timeout=15)
        after = prometheus.wait(stop, lambda v: v is not None and v >= before + 1, timeout=15)
        print(f"\nrank 3 killed on spark-04: every rank exited {elapsed:.2f} s after the kill; "
              f"the watchdog's detection to stopped: {detection:.2f} s; "
              f"actions_total{{action=stop}} {before:g} -> {after:g}")
        assert elapsed < STOP_WITHIN_S, f"the group took {elapsed:.2f} s to stop"
        assert after == before + 1
        with Fleet(inventory) as fleet:  # the record stays for the operator; logs are kept
            assert read_records(fleet, inventory)["current"].deployment_id == \
                deployment.deployment_id
            assert clients_exist(fleet, specs)
        verdicts = [v["verdict"] for v in watch_status()["verdicts"]]
        assert "stopped" in verdicts and verdicts[-1] in ("stopped", "down"), verdicts
    finally:
        lanes.down(inventory)


def test_a_wedged_rank_is_found_by_the_service_its_evidence_audited(engine_rack, installed,
                                                                     prometheus):
    """Issue 25: vLLM's /health stays green while rank 3 hangs in a long prompt's forward;
    the service (stall budget 8 s, set in its inventory copy) stops the group within the
    budget and 10 s, names the rank, audits the evidence; the metric and alert fire."""
    from sparkrack.deployments.headapi import Endpoint
    from sparkrack.oplock.audit import parse_lines
    from sparkrack.oplock.remote import AUDIT_FILE
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    inventory, budget = engine_rack, 8
    lanes.down(inventory)
    copy = f"{DEFAULT_INSTALL_DIR}/inventory/group_vars/all.yml"
    original = on_watchdog_node(inventory, ["cat", copy]).stdout
    assert original
    set_budget = sh('printf "%s\nwatchdog_stall_budget_s: %s\n" "$(cat "$1")" "$2" > "$1.new" '
                    '&& mv "$1.new" "$1" && systemctl restart "$3"', copy, str(budget), UNIT)
    try:
        assert on_watchdog_node(inventory, set_budget).ok
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50,
                                     "ranks": {"3": {"wedge_above_tokens": 400}}})
        lanes.up(inventory, "vllm", "512k")
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        specs = build_specs(inventory, "vllm", "512k")

        def ask():
            try:
                Endpoint(inventory.head, 8000, "GLM-5.3").chat(
                    [{"role": "user", "content": "word " * 600}], 8, timeout=120)
            except Exception:  # noqa: BLE001 - the wedged group is stopped under it
                pass
        import threading
        threading.Thread(target=ask, daemon=True).start()
        wedged = time.monotonic()
        with Fleet(inventory) as fleet:
            clients = {spec.node: fleet.docker_client(spec.node) for spec in specs}
            wait_for("every rank stopped", lambda: not any(
                clients[spec.node].api.inspect_container(spec.container_name)["State"]["Running"]
                for spec in specs), budget + 30, interval=0.2)
        found = time.monotonic() - wedged
        stalled = prometheus.wait('sparkrack_group_stalled{node="spark-04",rank="3"}',
                                  lambda v: v == 1, timeout=15)
        alert = prometheus.wait('ALERTS{alertname="SparkrackGroupStalled",alertstate="firing"}',
                                lambda v: v == 1, timeout=15)
        print(f"\nthe service stopped the wedged group {found:.1f} s after the long prompt "
              f"(stall budget {budget} s); sparkrack_group_stalled {stalled:g}, alert {alert:g}")
        assert found < budget + 10, found
        detail = next(v["detail"] for v in reversed(watch_status()["verdicts"])
                      if v["verdict"] == "stopped")
        assert detail.startswith("rank 3 on spark-04 wedged: 1 running, 0 waiting, no token "
                                 "progress for "), detail
        with Fleet(inventory, [inventory.head]) as fleet:
            log = parse_lines(fleet.run(["cat", AUDIT_FILE])[inventory.head.name].stdout)
        record = [r for r in log if r.get("task") == "watchdog:stopped"][-1]
        assert record["changed"]["culprit"] == {"node": "spark-04", "rank": 3}
        assert record["changed"]["stall"]["gpus"]["spark-04"] == "idle"  # its host hung
        assert record["changed"]["stall"]["stall_budget_s"] == budget
    finally:
        lanes.down(inventory)
        restore = sh('printf "%s" "$2" > "$1.new" && mv "$1.new" "$1" && systemctl restart "$3"',
                     copy, original, UNIT)
        assert on_watchdog_node(inventory, restore).ok


def test_the_service_reapplies_a_lost_cap_and_reports_a_latched_and_a_hot_gpu(
        engine_rack, installed, prometheus, rack):
    """Under a steady vLLM load: spark-06's lock reset as `nvidia-smi -rgc` does, spark-03's
    GPU latched, spark-05's heated 40 C. The service restarts spark-06's cap unit, the cap
    takes (its lock is back; audited, counted); the latched and the hot GPU show in
    Prometheus and their alerts are pending; the group serves on."""
    import threading

    from sparkrack.oplock.audit import parse_lines
    from sparkrack.oplock.remote import AUDIT_FILE
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    inventory = engine_rack
    lanes.down(inventory)
    done, answered = threading.Event(), []
    try:
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50})
        lanes.up(inventory, "vllm", "512k")
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        steady_load(inventory, 8000, done, answered)
        slowdown = prometheus.wait('sparkrack_gpu_slowdown_temperature_celsius{node="spark-05"}',
                                   lambda v: v is not None, timeout=30)
        assert slowdown == 97  # GB10's: 2 C past its 95 C T.Limit
        rack.reset_clocks("spark-06")
        rack.latch("spark-03")
        rack.heat("spark-05", 40)
        took = prometheus.wait('sparkrack_watchdog_cap_reapplied_total{node="spark-06",'
                               'outcome="took"}', lambda v: v == 1, timeout=30)
        latched = prometheus.wait('sparkrack_gpu_latched{node="spark-03"}', lambda v: v == 1)
        # hot as the watchdog and SparkrackGpuHot judge it: within THERMAL_MARGIN_C of the
        # slowdown. Its reading swings with the decode's power: at 95 C (T.Limit) only while
        # the thermal slowdown holds it there, lower between (a poll may miss it for 30 s)
        hot = prometheus.wait('sparkrack_gpu_temperature_celsius{node="spark-05"}',
                              lambda v: v is not None and v >= slowdown - THERMAL_MARGIN_C)
        for alert in ("SparkrackGpuLatched", "SparkrackGpuHot"):  # their `for:` is a minute
            prometheus.wait(f'count(ALERTS{{alertname="{alert}"}})', lambda v: v == 1)
        print(f"\ncap re-applied on spark-06 ({took:g}), spark-03 latched ({latched:g}), "
              f"spark-05 at {hot:g} C (slowdown {slowdown:g} C)")
        lock = on_node(inventory, "spark-06", ["cat", "/run/gpu-sim/clock-lock.json"])
        assert json.loads(lock.stdout) == [0, inventory.vars.clock_cap_mhz]
        prometheus.wait('sparkrack_gpu_over_cap{node="spark-06"}', lambda v: v == 0)
        with Fleet(inventory, [inventory.head]) as fleet:
            log = parse_lines(fleet.run(["cat", AUDIT_FILE])[inventory.head.name].stdout)
        record = [r for r in log if r.get("task") == "watchdog:cap-reapplied"][-1]
        assert record["outcome"] == "ok" and record["changed"]["node"] == "spark-06"
        assert record["changed"]["took"] is True
        assert record["changed"]["found"]["sm_mhz"] > inventory.vars.clock_cap_mhz
        assert record["changed"]["after"]["sm_mhz"] <= inventory.vars.clock_cap_mhz
        assert record["changed"]["unit"] == "active/success"
        journal = on_watchdog_node(inventory, ["journalctl", "-u", UNIT, "-b", "--no-pager",
                                               "-o", "cat"]).stdout
        assert "spark-03: GPU latched in its low-clock state: " in journal, journal[-3000:]
        assert "only a full power removal clears it: power spark-03 off at the wall" in journal
        # the heat climbs over a few polls: the first within 5 C of the 97 C slowdown is said
        hot_line = re.search(r"spark-05: GPU at (\d+) C, (\d+) C below its slowdown "
                             r"temperature \(slowdown 97 C; shutdown 100 C\)", journal)
        assert hot_line and 92 <= int(hot_line[1]) <= 96, journal[-3000:]
        assert int(hot_line[1]) + int(hot_line[2]) == 97, hot_line[0]
        assert "spark-06: clock cap re-applied (sparkrack-clock-cap.service restarted" in journal
        served = len(answered)
        wait_for("the group serving on", lambda: len(answered) > served + 2, 30)
    finally:
        done.set()
        rack.latch("spark-03", on=False)
        rack.heat("spark-05", None)
        lanes.down(inventory)


def test_a_port_gone_down_under_a_serving_group_is_named_by_the_service_and_the_check(
        engine_rack, installed, prometheus, rack):
    """Issue 56, items 3 and 4: rank 2's twin port goes down after the start (a cable out).
    Within the service's read of the rails (every 5 s) Prometheus shows rank 2 on one rail of
    two and the port down, SparkrackNcclDegraded is pending for rank 2 alone, its journal
    names the node, the HCA and what NCCL does now, `invoke status` shows rank 2 on one rail
    now and `fabric.check` names the rail as carrying nothing; the port back, both rails
    again and the alert gone."""
    from sparkrack.rails import check_fabric

    inventory = engine_rack
    lanes.down(inventory)
    rails = 'sparkrack_nccl_rails{node="spark-03",rank="2"}'
    port = 'sparkrack_nccl_port_up{node="spark-03",hca="roceP2p1s0f0"}'

    def journal() -> str:
        return on_watchdog_node(inventory, ["journalctl", "-u", UNIT, "-b", "--no-pager",
                                            "-o", "cat"]).stdout
    try:
        lanes.up(inventory, "sglang", "512k")
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        prometheus.wait(rails, lambda v: v == 2, timeout=30)
        assert prometheus.value('sparkrack_nccl_expected_rails{node="spark-03",rank="2"}') == 2
        assert prometheus.value('sparkrack_nccl_socket{node="spark-03",rank="2"}') == 0
        rack.hca_down("spark-03", "roceP2p1s0f0")
        downed = time.monotonic()
        prometheus.wait(rails, lambda v: v == 1, timeout=30)
        seen = time.monotonic() - downed
        assert prometheus.value(port) == 0
        alert = 'ALERTS{alertname="SparkrackNcclDegraded",node="spark-03",rank="2"'
        prometheus.wait(alert + ',alertstate="pending"}', lambda v: v == 1, timeout=15)
        # pending: its `for:` is a minute; rank 2's alone, and not the TCP one
        assert prometheus.value('count(ALERTS{alertname=~"SparkrackNccl.*"})') == 1
        assert prometheus.value('sparkrack_nccl_rails{node="spark-04",rank="3"}') == 2
        said = wait_for("the finding in the journal", lambda: next(
            (line for line in journal().splitlines() if "roceP2p1s0f0's port went down" in line),
            None), 15)
        fabric = check_fabric(inventory, seconds=0.2)
        shown = subprocess.run([sys.executable, "-m", "invoke", "status", "-i",
                                str(inventory.path)], cwd=REPO, capture_output=True, text=True,
                               timeout=120)
        rack.hca_down("spark-03", "roceP2p1s0f0", down=False)
        prometheus.wait(rails, lambda v: v == 2, timeout=30)
        prometheus.wait(alert + "}", lambda v: v is None, timeout=15)  # resolved
        wait_for("the port back in the journal",
                 lambda: "spark-03: roceP2p1s0f0's port is up again" in journal(), 15)
    finally:
        rack.hca_down("spark-03", "roceP2p1s0f0", down=False)
        lanes.down(inventory)
    print(f"\nrank 2 on one rail in Prometheus {seen:.1f} s after the port went down\n{said}")
    assert said.endswith(
        "spark-03: roceP2p1s0f0's port went down (1: DOWN) under rank 2's NCCL: NCCL 2.27.7 "
        "only warns (`NET/IB : roceP2p1s0f0:1 Got async error event: port error`); its "
        "connections on that rail fail once the HCA's retries are spent (about 34 s at "
        "NCCL_IB_TIMEOUT 20, NCCL_IB_RETRY_CNT 7) and the group with them; started again, NCCL "
        "runs on 1 of 2 rails (rocep1s0f0), which `invoke up` refuses without "
        "--allow-degraded: reseat the cable (`invoke run --limit spark-03 -- ibdev2netdev` "
        "shows the ports)"), said
    assert ("nccl: rank 2 on spark-03: NET/IB on roceP2p1s0f0:1, rocep1s0f0:1 (DEGRADED now: "
            "the port of roceP2p1s0f0 is down (1: DOWN), 1 of 2 rails; NCCL fails that rail once "
            "the HCA's retries are spent (about 34 s) and the group with it: reseat the cable); "
            "the other 7: NET/IB on roceP2p1s0f0:1, rocep1s0f0:1") in " ".join(
                shown.stdout.split()), shown.stdout + shown.stderr
    assert ("spark-03: roceP2p1s0f0 (enP2p1s0f0np0) of nccl_ib_hca carries nothing: its port "
            "is down (1: DOWN); NCCL skips it without an error and runs on rocep1s0f0 alone, "
            "about 1/2 of the node's bandwidth") in "\n".join(fabric.problems), fabric.problems


def test_allowed_the_service_power_cycles_its_own_latched_node_and_finishes_after_the_boot(
        engine_rack, installed, prometheus, rack):
    """Issue 53: reinstalled with --allow-power-cycle (the PDU's keys in a 0600 file, shown
    nowhere), the head spark-01, where the watchdog runs, latches under a steady SGLang
    load. The service stops the group in order, keeps the pending restart on disk and cuts
    its own outlet; the service systemd starts after the boot finishes the cycle: the node
    burned, the group started again, one audit record. watch.status and status say so."""
    import threading

    from sparkrack.oplock.audit import select
    from sparkrack.rehearsal.pdu import REHEARSAL_CREDENTIALS

    inventory = engine_rack
    lanes.down(inventory)
    allowed = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE,
                     "--allow-power-cycle")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    shown = allowed.stdout + allowed.stderr
    for key in ("SPARKRACK_PDU_AUTH_KEY", "SPARKRACK_PDU_PRIV_KEY"):
        assert REHEARSAL_CREDENTIALS[key] not in shown
    keys = on_watchdog_node(inventory, ["stat", "-c", "%a %U", f"{DEFAULT_INSTALL_DIR}/pdu.env"])
    assert keys.stdout.split() == ["600", "root"], keys
    assert f"--node {WATCHDOG_NODE} --allow-power-cycle" in unit_property(inventory, "ExecStart")
    done, answered = threading.Event(), []
    cycled = (f'sparkrack_watchdog_power_cycle_timestamp_seconds{{node="{WATCHDOG_NODE}",'
              'cause="latched",outcome="ok"}')
    try:
        measured = prometheus.wait('sparkrack_pdu_measured_watts{pdu="rehearsal-pdu"}',
                                   lambda v: v is not None, timeout=60)  # the PDU, over SNMP
        assert measured >= 8 * 25, measured
        first = lanes.up(inventory, "sglang", "512k").deployment_id
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        steady_load(inventory, 30000, done, answered)
        boot = on_node(inventory, WATCHDOG_NODE, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout
        wait_for("requests answered before the latch", lambda: len(answered) > 2, 60)
        latched_at, since = time.monotonic(), time.time()
        rack.latch(WATCHDOG_NODE)
        prometheus.wait(cycled, lambda v: v is not None and v >= since, timeout=240)
        cycled_in = time.monotonic() - latched_at
        prometheus.wait(f'sparkrack_deployment_info{{deployment!="{first}"}} '
                        "* on() sparkrack_watchdog_guarding", lambda v: v == 1, timeout=120)
        serving_in = time.monotonic() - latched_at
        assert not rack.status()[0].latched
        assert on_node(inventory, WATCHDOG_NODE,
                       ["cat", "/proc/sys/kernel/random/boot_id"]).stdout != boot
        wait_for("requests answered after the latch",
                 lambda: sum(1 for t in answered if t > latched_at + serving_in) > 2, 60)
        print(f"\n{WATCHDOG_NODE} (the head, the watchdog's own node) latched: power-cycled "
              f"and finished by the service after its boot {cycled_in:.0f} s later; a new "
              f"deployment of the lane guarded {serving_in:.0f} s after the latch")
        record, log, now = power_cycle_audited(inventory, since)
        changed = record["changed"]
        assert changed["power_cycled"] == [WATCHDOG_NODE]
        assert changed["outlets"] == ["rehearsal-pdu:1"]
        assert changed["stopped"] == first and "drain" in changed  # rank 0 drained first
        assert changed["burn"] == [f"{WATCHDOG_NODE}: ok"] and changed["resumed"] is True
        assert changed["restarted"] == now != first
        assert record["lock"]["resumed"] is True
        assert not select(log, since=since, task="watchdog-restart")  # one record, not two
        journal = on_watchdog_node(inventory, ["journalctl", "-u", UNIT, "-b", "--no-pager",
                                               "-o", "cat"]).stdout
        assert (f"resuming the power cycle of {WATCHDOG_NODE} (latched), outlet "
                "rehearsal-pdu:1 cut; sglang 512k to start again") in journal, journal[-3000:]
        assert "sglang 512k started again in order" in journal, journal[-3000:]
        status = watch_status()
        [entry] = status["power_cycles"]["nodes"][WATCHDOG_NODE]
        assert (entry["outcome"], entry["deployment"], entry["restarted"]) == ("ok", first, now)
        assert status["power_cycles"]["pending"] is None
        assert "power-cycled" in [v["verdict"] for v in status["verdicts"]]
        shown = invoke("watch.status", "-i", "inventory/rehearsal", timeout=60).stdout
        assert f"power cycle of {WATCHDOG_NODE}: " in shown and ", latched: ok: " in shown
        rack_status = invoke("status", "-i", "inventory/rehearsal", "--json", timeout=60)
        cycle = json.loads(rack_status.stdout)["power_cycle"]
        assert (cycle["node"], cycle["outcome"], cycle["restarted"]) == (WATCHDOG_NODE, "ok", now)
        assert cycle["by"] == f"the watchdog on {WATCHDOG_NODE}" and cycle["time"] >= since
        text = invoke("status", "-i", "inventory/rehearsal", timeout=60).stdout
        assert f"power cycle: {WATCHDOG_NODE} at " in text and "(latched): ok: " in text
    finally:
        done.set()
        rack.latch(WATCHDOG_NODE, on=False)
        lanes.down(inventory)
        plain = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE)
        assert plain.returncode == 0, plain.stdout + plain.stderr
        on_node(inventory, inventory.head.name,  # the next tests' `status` shows none
                ["rm", "-f", f"{RECORD_DIR}/power-cycle.json"])
    assert "--allow-power-cycle" not in unit_property(inventory, "ExecStart")


def test_allowed_the_service_power_cycles_a_wedged_worker_and_the_group_serves_again(
        engine_rack, installed, prometheus, rack):
    """Issue 56 item 6: spark-03's host wedges under a steady SGLang load, as unified-memory
    exhaustion wedges a GB10 (every process stopped, its kernel still taking TCP, its outlet
    drawing). The service names it wedged with its outlet and draw, power-cycles it through
    the PDU after two polls (cycling.CAUSE_SAMPLES) and starts the group again, which
    serves. Before, the node was a lost node like any: the group stopped, nothing cycled."""
    from sparkrack.rehearsal.faults.kernel import wedged_w

    inventory, node = engine_rack, "spark-03"
    lanes.down(inventory)
    # a cycle of spark-03 kept by an earlier run in this rack's slot would hold this one back
    # (one cycle per node per window): the service starts again below from no state
    on_watchdog_node(inventory, ["sh", "-c", 'systemctl stop "$1" && rm -f "$2"', "sh", UNIT,
                                 f"{STATE_DIR}/state.json"])
    allowed = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE,
                     "--allow-power-cycle")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    done, answered = threading.Event(), []
    cycled = (f'sparkrack_watchdog_power_cycle_timestamp_seconds{{node="{node}",'
              'cause="wedged",outcome="ok"}')
    try:
        prometheus.wait('sparkrack_pdu_measured_watts{pdu="rehearsal-pdu"}',
                        lambda v: v is not None, timeout=60)
        first = lanes.up(inventory, "sglang", "512k").deployment_id
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        steady_load(inventory, 30000, done, answered)
        wait_for("requests answered before the wedge", lambda: len(answered) > 2, 60)
        wedged_at, since = time.monotonic(), time.time()
        rack.wedge_host(node)
        watts = round(wedged_w(rack.node(node)))
        prometheus.wait(cycled, lambda v: v is not None and v >= since, timeout=300)
        cycled_in = time.monotonic() - wedged_at
        prometheus.wait(f'sparkrack_deployment_info{{deployment!="{first}"}} '
                        "* on() sparkrack_watchdog_guarding", lambda v: v == 1, timeout=120)
        serving_in = time.monotonic() - wedged_at
        assert wedged_w(rack.node(node)) is None  # the power cut ended it
        wait_for("requests answered after the cycle",
                 lambda: sum(1 for t in answered if t > wedged_at + serving_in) > 2, 60)
        print(f"\n{node} wedged ({watts} W at its outlet): power-cycled by the service "
              f"{cycled_in:.0f} s later; a new deployment guarded {serving_in:.0f} s after the "
              "wedge")
        journal = on_watchdog_node(inventory, ["journalctl", "-u", UNIT, "-b", "--no-pager",
                                               "-o", "cat"]).stdout
        [line] = {text for text in journal.splitlines()
                  if f"node {node} lost (" in text and ": wedged: " in text
                  and "seen in 1 of the" in text}
        print(line)
        assert (f": wedged: SSH unanswered, its kernel still taking TCP on the SSH port, while "
                f"rehearsal-pdu outlet 3 draws {watts} W: a host wedged by unified-memory "
                f"exhaustion") in line, line
        assert (f"{node}: host wedged (SSH unanswered, its kernel and outlet alive) for 2 "
                "consecutive polls") in journal
        assert "sglang 512k started again in order" in journal, journal[-3000:]
        record, log, now = power_cycle_audited(inventory, since)
        changed = record["changed"]
        assert changed["power_cycled"] == [node] and changed["outlets"] == ["rehearsal-pdu:3"]
        assert changed["restarted"] == now != first, changed  # the wedged group replaced
        assert changed["burn"] == [f"{node}: ok"]
    finally:
        done.set()
        if wedged_w(rack.node(node)) is not None:
            rack.poweroff(node)
            rack.poweron(node)
        lanes.down(inventory)
        plain = invoke("watch.install", "-i", "inventory/rehearsal", "--on", WATCHDOG_NODE)
        assert plain.returncode == 0, plain.stdout + plain.stderr
        on_node(inventory, inventory.head.name, ["rm", "-f", f"{RECORD_DIR}/power-cycle.json"])


def power_cycle_audited(inventory, since) -> tuple[dict, list, str]:
    """The one watchdog.power-cycle record audited since `since` (its outcome ok), the
    audit log it is in, and the deployment current now."""
    from sparkrack.oplock.audit import merge, parse_lines, select
    from sparkrack.oplock.remote import AUDIT_FILE

    with Fleet(inventory, [inventory.head]) as fleet:
        log = merge(parse_lines(fleet.run(["cat", AUDIT_FILE])[inventory.head.name].stdout))
        now = read_records(fleet, inventory)["current"].deployment_id
    [record] = select(log, since=since, task="watchdog.power-cycle")
    assert record["outcome"] == "ok", record
    return record, log, now


def steady_load(inventory, port: int, done, answered: list) -> None:
    """Chat requests to rank 0 on port, one after another in a thread until done is set;
    each answer's time appended to answered (a request failing while the group is down is
    tried again)."""
    import threading

    from sparkrack.deployments.headapi import Endpoint

    def load():
        head = Endpoint(inventory.head, port, "GLM-5.3")
        while not done.is_set():
            try:
                head.chat([{"role": "user", "content": "word " * 20}], 50, timeout=60)
                answered.append(time.monotonic())
            except Exception:  # noqa: BLE001 - the group going down under it
                time.sleep(0.2)

    threading.Thread(target=load, daemon=True).start()


def on_node(inventory, node: str, argv):
    with Fleet(inventory, inventory.select(node)) as fleet:
        return fleet.run(argv, timeout=30)[node]


def clients_exist(fleet, specs) -> bool:
    """Whether every rank's container is still there (stopped, not removed)."""
    return all(fleet.docker_client(spec.node).containers.get(spec.container_name) is not None
               for spec in specs)


def test_the_service_is_back_after_its_node_reboots_and_guards_again(engine_rack, installed,
                                                                     prometheus, rack):
    inventory = engine_rack
    lanes.down(inventory)
    since = unit_property(inventory, "ActiveEnterTimestamp")
    boot = on_watchdog_node(inventory, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout
    rack.reboot(WATCHDOG_NODE)
    assert on_watchdog_node(inventory, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout != boot
    wait_for("the watchdog active after the boot",
             lambda: unit_property(inventory, "ActiveState") == "active", 60)
    status = watch_status()
    assert status["active_state"] == "active" and status["since"] != since, (status, since)
    prometheus.wait("up", lambda v: v == 1, timeout=30)  # scraped again
    try:
        lanes.up(inventory, "sglang", "512k")
        prometheus.wait("sparkrack_watchdog_guarding", lambda v: v == 1, timeout=60)
        assert "guarding" in [v["verdict"] for v in watch_status()["verdicts"]]
    finally:
        lanes.down(inventory)


def test_uninstall_leaves_nothing_on_any_node(installed, prometheus):
    inventory = installed
    done = invoke("watch.uninstall", "-i", "inventory/rehearsal")
    assert done.returncode == 0, done.stdout + done.stderr
    assert read_record(inventory.path) is None
    assert not (inventory.path / ".sparkrack" / "watchdog.json").exists()
    with Fleet(inventory) as fleet:
        left = fleet.run({WATCHDOG_NODE: sh(
            'for p in "$@"; do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done',
            *LEFTOVERS)})[WATCHDOG_NODE]
        assert left.ok and left.stdout == "", left.stdout
        load = fleet.run({WATCHDOG_NODE: ["systemctl", "show", "-p", "LoadState", "--value",
                                          UNIT]})[WATCHDOG_NODE]
        assert load.stdout.strip() == "not-found"
        keys = fleet.run(sh('grep -c -- "$1" "$2"; exit 0', MARKER,
                            inventory.vars.ssh_authorized_keys_file))
        assert keys.all_ok and {r.node: r.stdout.strip() for r in keys} == {
            node.name: "0" for node in inventory.nodes}
    assert watch_status()["installed"] is False
    prometheus.wait('up{job="sparkrack-watchdog"}', lambda v: v == 0, timeout=30)
    again = invoke("watch.uninstall", "-i", "inventory/rehearsal")
    assert again.returncode == 0, again.stdout + again.stderr  # nothing left to remove
