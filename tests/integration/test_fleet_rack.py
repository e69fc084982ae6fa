"""A fleet of two rehearsal racks behind one router (SMG) on this machine: the second rack
boots beside the session's (its own addresses, bridges, cgroups and state) for this module
only, and the router runs as `rehearsal.up --racks 2` starts it. Two scenarios, each under
a steady load of streaming clients whose every request's outcome is counted: one rack
rolled plainly with no router (requests fail), and the fleet's whole life through the
router (`fleet.up`, `fleet.status`, two `fleet.roll`s and a failed one, a head powered off,
the router's dashboard panels, `fleet.down`; `fleet.router.install` on the way).
docs/fleet.md
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest
import rackhealth
import yaml
from fleetload import Load
from hosttools import need
from localproc import running
from provision_helpers import inventory_copy
from stubgroup import quick_burn
from test_dashboard_rack import GRAFANA_VARIABLES, dashboard_queries
from test_watchdog_rack import Prometheus, free_port

from sparkrack.data import shipped
from sparkrack.deployments.headapi import Endpoint, parse_prometheus
from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.racks.fleetfile import load_fleet
from sparkrack.racks.roll import FleetStopped, fleet_roll
from sparkrack.racks.router import Router
from sparkrack.racks.status import fleet_status
from sparkrack.rehearsal.fleetrouter import fleet_file, start_router, stop_router
from sparkrack.rehearsal.rack import RehearsalRack
from sparkrack.rehearsal.stub.modeldir import write_stub_model

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
STUB = {"load_delay_s": 0.3, "tokens_per_s": 50, "drain_poll_s": 0.5}
CLIENTS = 8
PORTS = {"sglang": 30000, "vllm": 8000}
SOAK_S = 2  # each rack's soak in the scenario: ~20 requests through the router
TOKENS = 60  # each of the fleet's streams: 1.2 s at the stub's 50 tokens/s
# a client gives up after this long a silence (connecting, or between two chunks): while
# one rack serves all eight clients (the other rolled or dead) on SGLang's 512k lane (two
# running, the rest waiting their turn), a request's turn comes after about 3 x 1.2 s
CLIENT_TIMEOUT_S = 10


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The invoke CLI from the repo, as an operator runs it (a pipe: plain text)."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, timeout=timeout,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1", "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def second_rack(rack):
    """The second rack, booted beside the session's for this module, provisioned, with the
    fleet's router on this machine; all taken down at the end of the module."""
    second = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal-2"),
                           say=lambda msg: None)
    before, began = available_gib(), time.monotonic()
    second.up()
    booted = time.monotonic() - began
    try:
        rackhealth.repair_faults(second)
        rackhealth.provisioned(second.inventory)
        for node in second.nodes:
            second.load_startup(node.name, rackhealth.LOAD_STARTUP_S)
        with Fleet(second.inventory) as fleet:
            write_stub_model(fleet, STUB)
        start_router(rack.inventory.path, say=lambda msg: None)
        print(f"\nsecond rack: booted in {booted:.1f} s; this machine's MemAvailable "
              f"{before:.1f} -> {available_gib():.1f} GiB")
        yield second
    finally:
        stop_router()
        lanes.down(second.inventory)
        second.down()


@pytest.fixture
def fleet_path(engine_rack, second_rack, tmp_path, monkeypatch):
    """The rehearsal fleet's file as the test's own: the same racks and router, a short
    soak, and rack 1's inventory copied with an SGLang profile every rank refuses (a roll
    to it fails its start). Local state (the audit copy) in tmp_path. Both racks back to
    the router at the end."""
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    one = tmp_path / "rehearsal"
    shutil.copytree(engine_rack.path, one)
    engine = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    engine["profiles"]["broken"] = {"description": "a value SGLang refuses: every rank exits 2",
                                    "extends": "512k",
                                    "flags": {"--speculative-algorithm": "NO-SUCH-ALGORITHM"}}
    (one / ".sparkrack" / "engines").mkdir(parents=True, exist_ok=True)
    (one / ".sparkrack" / "engines" / "sglang.yml").write_text(yaml.safe_dump(engine))
    data = yaml.safe_load(fleet_file(engine_rack.path).read_text())
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump({**data, "racks": [str(one), str(second_rack.inventory.path)],
                                    "soak_s": SOAK_S}))
    yield path
    router = Router(load_fleet(path).router)  # a failed test's racks: the session's repair
    for worker in router.workers():  # (rack 1) and the module's end (rack 2) stop them
        router.drain(worker.url)


def counters(inventory, engine: str) -> tuple[float, float]:
    """(requests finished, requests in flight) on the rack's rank 0, from one scrape."""
    _, body = Endpoint(inventory.head, PORTS[engine]).get("/metrics")
    values = parse_prometheus(body.decode())
    if engine == "sglang":
        return (values.get("sglang:num_requests_total", 0.0),
                values["sglang:num_running_reqs"] + values["sglang:num_queue_reqs"])
    return (values.get("vllm:request_success_total", 0.0),
            values["vllm:num_requests_running"] + values["vllm:num_requests_waiting"])


def sent_to(router: Router, url: str) -> float:
    """Requests the router has sent to the head at url (smg_worker_requests_total, counted
    at each send, retries included)."""
    from prometheus_client.parser import text_string_to_metric_families

    _, body = router._call("GET", "/metrics", port=router.spec.metrics_port)
    return sum(sample.value for family in text_string_to_metric_families(body.decode())
               for sample in family.samples if sample.name == "smg_worker_requests_total"
               and sample.labels.get("worker", "").rstrip("/") == url)


def test_a_plain_roll_of_one_rack_without_the_router_fails_requests(engine_rack, tmp_path):
    """The same load straight at one rack's head (api_port: one address for both lanes)
    while `roll` moves it from SGLang to vLLM: requests fail, so the fleet's zero can."""
    inventory = inventory_copy(engine_rack.path, tmp_path / "rack", api_port=9000,
                               drain_budget_s=3)
    steps = [time.monotonic()]
    lanes.up(inventory, "sglang", "512k", burn=quick_burn)
    steps.append(time.monotonic())
    load = Load(inventory.head.address, 9000, clients=CLIENTS).start()
    try:
        time.sleep(1)
        lanes.roll(inventory, "vllm", "512k", burn=quick_burn)
        steps.append(time.monotonic())
    finally:
        load.stop()
        steps.append(time.monotonic())
        lanes.down(inventory)
        steps.append(time.monotonic())
    failed = load.failed()
    print(f"\nplain roll without the router: {load.count()} requests, {len(failed)} failed; "
          f"first: {failed[0].why if failed else '-'}; up, roll, clients' end, down: "
          f"{[round(b - a, 1) for a, b in itertools.pairwise(steps)]} s")
    assert failed and load.count() > len(failed)


class Drains:
    """What reached each rack after the router drained it (a fleet task's events: its rank
    0's finished + in-flight count at the drain, and again once its in-flight count was 0)."""

    def __init__(self, racks: dict):
        self.racks, self.engine, self.marks, self.arrived = racks, "sglang", {}, {}

    def __call__(self, event: str) -> None:
        name, _, text = event.partition(": ")
        if name in self.racks and text.startswith("drained in the router"):
            self.marks[name] = sum(counters(self.racks[name], self.engine))
        elif name in self.racks and "in-flight request(s) finished" in text:
            finished, left = counters(self.racks[name], self.engine)
            self.arrived.setdefault(name, []).append(finished + left - self.marks.pop(name))

    def roll(self, fleet, engine: str, profile: str = "512k") -> list[dict]:
        """fleet.roll, watched; FleetStopped as it raises it (every rack on its old engine)."""
        reports = fleet_roll(fleet, engine, profile, burn=quick_burn, on_event=self)
        self.engine = engine
        return [report.as_dict() for report in reports]


def listen_overflows(inventory) -> int:
    """Connections the head's kernel dropped for want of room in a listener's accept queue
    (TcpExt ListenOverflows of its network namespace): a client's SYN went unanswered."""
    with Fleet(inventory, [inventory.head]) as head:
        text = head.run(["cat", "/proc/net/netstat"])[inventory.head.name].stdout
    names, values = [line.split() for line in text.splitlines() if line.startswith("TcpExt:")]
    return int(dict(zip(names, values, strict=True))["ListenOverflows"])


def audit_tasks(state: Path, task: str) -> list[dict]:
    """The local audit copy's records of task: start and end of each, joined."""
    records: dict = {}
    for line in (state / "audit.jsonl").read_text().splitlines():
        record = json.loads(line)
        records.setdefault(record["id"], {}).update(record)
    return [r for r in records.values() if r.get("task") == task]


def install_router_on(fleet, second, tmp_path: Path):
    """`fleet.router.install` of a fleet file whose router is one of rack 2's nodes (it
    reaches rack 2's head; it runs this machine's OS, so it is sent this machine's own
    installed smg: nothing is downloaded): (that fleet, what the install said, the unit's
    state)."""
    from sparkrack.racks.install import UNIT, install_router
    from sparkrack.rehearsal.layout import CLIENT_KEY

    host = second.nodes[-1]
    file = tmp_path / "installed.yml"
    file.write_text(yaml.safe_dump({
        "name": "installed", "racks": [str(path) for path in fleet.racks],
        "router": {"host": host.address, "port": 30090, "metrics_port": 29090,
                   "ssh_key": str(CLIENT_KEY), "known_hosts": str(second.known_hosts_path),
                   "health_check_interval_s": 1}}))
    installed = load_fleet(file)
    said: list[str] = []
    install_router(installed, on_event=said.append)
    with Fleet(second, [host]) as node:
        active = node.run(["systemctl", "is-active", UNIT])[host.name].stdout.strip()
    return installed, said, active


def check_installed(installed, second, said: list[str], active: str) -> None:
    """The installed router serves rack 2's head (registered with the fleet's connect
    timeout, ready, a stream through it whole); then its service is removed."""
    from sparkrack.racks.install import UNIT

    host = second.nodes[-1]
    try:
        router = Router(installed.router)
        url = f"http://{second.head.address}:{PORTS['sglang']}"
        router.register(url)
        ready = router.wait_ready(url, 60)
        whole = Load(host.address, 30090).one()
    finally:
        with Fleet(second, [host]) as node:
            node.run(["sh", "-c", 'systemctl disable --now "$1"; rm -rf /opt/sparkrack-router '
                      '"/etc/systemd/system/$1"; systemctl daemon-reload', "sh", UNIT])
    assert active == "active", said
    sent = next(line for line in said if "sending " in line)  # no download: a test sends
    assert "smg-1.13.0-" in sent and sent.endswith(  # no packet off this machine
        f"(this machine's installed smg 1.13.0, setproctitle {version('setproctitle')}, "
        "packed back)"), said
    assert ready.healthy and ready.connect_timeout_s == installed.router.connect_timeout_s
    assert whole.ok, whole.why


@pytest.fixture
def prometheus(fleet_path, tmp_path):
    """`invoke monitoring.render --fleet` as an operator runs it, and Debian's Prometheus on
    what it wrote, as written: it scrapes the fleet's router (job sparkrack-router)."""
    out = tmp_path / "monitoring"
    done = invoke("monitoring.render", "--out", str(out), "--fleet", str(fleet_path),
                  "-i", str(load_fleet(fleet_path).racks[0]))
    assert done.returncode == 0, done.stdout + done.stderr
    port = free_port()
    with running([need("prometheus"), f"--config.file={out / 'prometheus' / 'prometheus.yml'}",
                  f"--storage.tsdb.path={out / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                  "--log.level=warn"], out / "prometheus.log") as process:
        server = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while not (process.poll() is None and _answers(server)):
            assert time.monotonic() < deadline, (out / "prometheus.log").read_text()
            time.sleep(0.5)
        server.dashboard = out / "grafana" / "dashboards" / "sparkrack.json"
        yield server


def _answers(server: Prometheus) -> bool:
    try:
        return bool(server.query("up"))
    except OSError:
        return False


def power_on(rack: RehearsalRack, name: str) -> None:
    rack.poweron(name)
    rack.wait_booted([rack.node(name)])


def router_panels(prometheus: Prometheus, fleet: str) -> dict[str, list]:
    """Each query of the dashboard's router row (fleet-only: test_dashboard_rack leaves
    them here), the fleet chosen, once every one answers: {panel title: its last result}."""
    queries = dashboard_queries(prometheus.dashboard, {**GRAFANA_VARIABLES, "$fleet": fleet},
                                fleet=True)
    deadline = time.monotonic() + 60  # a rate needs two scrapes (every 5 s) of a new counter
    while empty := [f"{title}: {expr}" for title, expr in queries
                    if not prometheus.query(expr)]:
        assert time.monotonic() < deadline, f"empty router panels: {empty}"
        time.sleep(2)
    assert len(queries) >= 5, queries
    return {title: prometheus.query(expr) for title, expr in queries}


def table_rows(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines()]


def test_a_fleet_rolls_under_load_with_no_failed_request_and_a_dead_head_fails_only_its_own(
        fleet_path, second_rack, prometheus, tmp_path):
    """Both racks up through the router (`fleet.up`, `fleet.status`, as an operator runs
    them); eight streaming clients through the router while `fleet.roll` moves both racks
    SGLang -> vLLM, a roll to a profile whose start fails stops at rack 1 (put back on vLLM,
    registered again, rack 2 untouched), and `fleet.roll` moves both back to SGLang: no
    request fails, every stream ends with its final chunk, none reaches a drained rack.
    Then rack 2's head loses power under the load: the router takes it out of rotation,
    and the only requests that fail are those it had in flight when the power went (the
    router's own count), none sent after. The router's dashboard panels answer from a real
    Prometheus; `fleet.down` takes both racks out of the router and stops them."""
    fleet = load_fleet(fleet_path)
    racks = {inventory.vars.rack_name: inventory for inventory in fleet.inventories()}
    router, second = Router(fleet.router), second_rack.inventory
    began, timeline = time.monotonic(), []

    def mark(step: str) -> None:
        timeline.append((round(time.monotonic() - began, 1), step))

    with ThreadPoolExecutor(1) as pool:  # the router's host is not the racks' business
        installing = pool.submit(install_router_on, fleet, second, tmp_path)
        up = invoke("fleet.up", "--engine", "sglang", "--fleet", str(fleet_path), "--json")
        mark("fleet.up")
        installed, said, active = installing.result()
    mark("fleet.router.install on one of rack 2's nodes")
    check_installed(installed, second, said, active)
    mark("the installed router checked and removed")
    assert up.returncode == 0, up.stdout + up.stderr
    assert [(r["rack"], r["serving"], sorted(r["steps"])) for r in json.loads(up.stdout)] == [
        (name, "sglang 512k", ["register", "smoke", "soak", "up"]) for name in racks]
    shown = invoke("fleet.status", "--fleet", str(fleet_path))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = table_rows(shown.stdout)
    assert rows[0] == ["rack", "serving", "head api", "health", "router", "load"], rows
    assert [(r[0], r[1], r[3], r[4]) for r in rows[1:]] == [
        (name, "sglang 512k", "200", "ready") for name in racks], rows

    drains = Drains(racks)
    overflows = {name: listen_overflows(inv) for name, inv in racks.items()}
    load = Load(fleet.router.host, fleet.router.port, clients=CLIENTS, tokens=TOKENS,
                timeout=CLIENT_TIMEOUT_S).start()
    try:
        time.sleep(1)
        rolled = [("vllm", r) for r in drains.roll(fleet, "vllm")]
        mark("fleet.roll vllm")
        workers = {w.url: w.id for w in router.workers()}
        with pytest.raises(FleetStopped) as stopped:
            drains.roll(fleet, "sglang", "broken")
        mark("fleet.roll sglang broken: stopped at rack 1")
        after_stop = {w.url: w for w in router.workers()}
        rolled += [("sglang", r) for r in drains.roll(fleet, "sglang")]
        mark("fleet.roll sglang")
        overflows = {name: listen_overflows(inv) - overflows[name] for name, inv in racks.items()}

        url = f"http://{second.head.address}:{PORTS['sglang']}"
        time.sleep(2)
        sent, on_it = sent_to(router, url), router.worker(url).load
        cut = time.monotonic()
        second_rack.poweroff(second.head.name)
        on_it += sent_to(router, url) - sent  # sent there between the two readings
        while (worker := router.worker(url)) is not None and worker.healthy \
                and time.monotonic() - cut < 30:
            time.sleep(0.2)
        out = time.monotonic() - cut
        mark(f"rack 2's head powered off; out of rotation after {out:.1f} s")
        dead = invoke("fleet.status", "--fleet", str(fleet_path))  # the load on rack 1 alone
    finally:
        load.stop()
    with ThreadPoolExecutor(1) as pool:  # the head boots while Prometheus scrapes on
        booting = pool.submit(power_on, second_rack, second.head.name)
        answered = router_panels(prometheus, fleet.name)
        mark("the router's dashboard panels answered")
        booting.result()
    mark("rack 2's head powered on")
    errors = {r["metric"].get("error_type") for r in answered["Router errors/s"]}

    down = invoke("fleet.down", "--fleet", str(fleet_path), "--json")
    mark("fleet.down")
    failed, whole = load.failed(), [o for o in load.outcomes if o.ok]
    print(f"\nfleet under {CLIENTS} streaming clients: {load.count()} requests, {len(whole)} "
          f"whole, {len(failed)} failed ({on_it} on rack 2 when its power went); rack 2 out "
          f"of rotation after {out:.1f} s; router errors by type: {sorted(errors)}")
    for target, report in rolled:
        print(f"  to {target}: {report}")
    for seconds, step in timeline:
        print(f"  {seconds:6.1f} s  {step}")
    print(f"  listen overflows on the heads during the rolls: {overflows}")
    slow = [(round(o.began - cut, 1), round(o.answered - o.began, 1), round(o.ended - o.began, 1))
            for o in load.outcomes if o.ended - o.began > 3]
    print(f"  over 3 s (began - cut, answered after, ended after): {slow}")
    took = sorted(o.ended - o.began for o in whole)
    print(f"  whole requests: p50 {took[len(took) // 2]:.2f} s, max {took[-1]:.2f} s; "
          f"over 5 s: {[(round(o.began - cut), round(o.ended - o.began, 1)) for o in whole if o.ended - o.began > 5]}")

    # the rolls: no request failed, none reached a drained rack, each rack where it belongs
    assert [f for f in failed if f.began >= cut or f.ended < cut] == [], \
        [(round(f.began - cut, 2), f.why) for f in failed if f.began >= cut or f.ended < cut]
    assert len([o for o in whole if o.ended < cut]) > 10 * CLIENTS
    assert drains.arrived == {"rehearsal": [0, 0, 0], "rehearsal-2": [0, 0]}, drains.arrived
    assert [(t, r["rack"], r["serving"]) for t, r in rolled] == [
        ("vllm", "rehearsal", "vllm 512k"), ("vllm", "rehearsal-2", "vllm 512k"),
        ("sglang", "rehearsal", "sglang 512k"), ("sglang", "rehearsal-2", "sglang 512k")]
    assert all(r["soak_requests"] > 0 and r["soak_failed"] == 0 for _, r in rolled), rolled
    # the failed roll: rack 1 back on vLLM and registered again, rack 2 never touched
    assert stopped.value.line().startswith("fleet.roll stopped at rehearsal: roll to sglang "
                                           "broken failed"), stopped.value.line()
    assert "it serves vllm 512k, registered in the router again; the racks after it were " \
        "not rolled" in stopped.value.line(), stopped.value.line()
    one, two = (f"http://{racks[n].head.address}:{PORTS['vllm']}" for n in racks)
    assert set(after_stop) == {one, two} and all(
        w.status == "ready" and w.healthy for w in after_stop.values()), after_stop
    assert after_stop[one].id != workers[one] and after_stop[two].id == workers[two]
    audited = {name: [r["outcome"] for r in sorted(audit_tasks(tmp_path / "state", "fleet.roll"),
                                                   key=lambda r: r["ts"]) if r["rack"] == name]
               for name in racks}
    assert audited == {"rehearsal": ["ok", "failed", "ok"], "rehearsal-2": ["ok", "ok"]}
    # the powered-off head: out of rotation; what failed was in flight on it, none after
    assert worker is None or not worker.healthy
    assert 1 <= len(failed) <= on_it, [f.why for f in failed]
    assert [o for o in whole if o.began > cut + out], "the load went on on rack 1"
    assert dead.returncode == 1, dead.stdout + dead.stderr
    row = next(r for r in table_rows(dead.stdout) if r[0] == "rehearsal-2")
    assert row[1] == "-" and "unhealthy" in row[4], row
    assert "rehearsal-2: " in dead.stderr and second.head.name in dead.stderr, \
        dead.stdout + dead.stderr
    assert "backend_error" in errors
    # fleet.down: both racks out of the router and stopped
    assert down.returncode == 0, down.stdout + down.stderr
    assert [(r["rack"], "down" in r["steps"]) for r in json.loads(down.stdout)] == [
        (name, True) for name in racks]
    assert [w for w in router.workers() if w.status != "draining"] == []
    rows, _ = fleet_status(fleet)
    assert [(r.rack, r.serving) for r in rows] == [(name, None) for name in racks]
