"""A fleet of two rehearsal racks behind one router (SMG) on this machine: the second rack
boots beside the session's (its own addresses, bridges, cgroups and state) for this module
only, and the router runs as `rehearsal.up --racks 2` starts it. One rack rolled plainly
with no router under a steady load of streaming clients (requests fail); then the fleet,
started once for the module (`fleet.up`, `fleet.router.install` meanwhile), under the same
load through the router: two `fleet.roll`s and a failed one (no request fails), a head
powered off (only its in-flight requests fail), the router's dashboard panels,
`fleet.down`. docs/fleet.md
"""

from __future__ import annotations

import itertools
import json
import os
import re
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
CLIENTS = 8
PORTS = {"sglang": 30000, "vllm": 8000}
SOAK_S = 2  # each rack's soak in the scenario: ~20 requests through the router
TOKENS = 60  # each of the fleet's streams: 1.2 s at the stub's 50 tokens/s
# a client gives up after this long a silence (connecting, or between two chunks): while
# one rack serves all eight clients (the other rolled or dead) on SGLang's 512k lane (two
# running, the rest waiting their turn), a request's turn comes after about 3 x 1.2 s
CLIENT_TIMEOUT_S = 10
SMG_ATTEMPTS = 5  # a request's attempts in SMG, the first included (--retry-max-retries)


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
            write_stub_model(fleet, rackhealth.STUB_CONFIG)
        start_router(rack.inventory.path, say=lambda msg: None)
        print(f"\nsecond rack: booted in {booted:.1f} s; this machine's MemAvailable "
              f"{before:.1f} -> {available_gib():.1f} GiB")
        yield second
    finally:
        stop_router()
        lanes.down(second.inventory)
        second.down()


class Started:
    """The module's fleet, started once: its file, what `fleet.up` and the router's
    install did."""

    def __init__(self, path: Path, state: Path):
        self.path, self.state = path, state
        self.file = load_fleet(path)
        self.racks = {inv.vars.rack_name: inv for inv in self.file.inventories()}
        self.router = Router(self.file.router)


@pytest.fixture(scope="module")
def fleet(rack, second_rack, tmp_path_factory):
    """The rehearsal fleet's file as the module's own (the same racks and router, a short
    soak, rack 1's inventory copied with an SGLang profile every rank refuses: a roll to
    it fails its start; local state, the audit copy, in a folder of its own), both racks
    started through the router with `fleet.up` as an operator runs it, and meanwhile
    `fleet.router.install` onto one of rack 2's nodes. Every worker drained at the end (a
    failed test's racks: the session's repair, rack 1, and the module's end, rack 2, stop
    them)."""
    rackhealth.ready_for_engines(rack, rackhealth.STUB_CONFIG)
    here = tmp_path_factory.mktemp("fleet")
    one = here / "rehearsal"
    shutil.copytree(rack.inventory.path, one)
    engine = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    engine["profiles"]["broken"] = {"description": "a value SGLang refuses: every rank exits 2",
                                    "extends": "512k",
                                    "flags": {"--speculative-algorithm": "NO-SUCH-ALGORITHM"}}
    (one / ".sparkrack" / "engines").mkdir(parents=True, exist_ok=True)
    (one / ".sparkrack" / "engines" / "sglang.yml").write_text(yaml.safe_dump(engine))
    data = yaml.safe_load(fleet_file(rack.inventory.path).read_text())
    path = here / "fleet.yml"
    path.write_text(yaml.safe_dump({**data, "racks": [str(one), str(second_rack.inventory.path)],
                                    "soak_s": SOAK_S}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARKRACK_STATE_DIR", str(here / "state"))
        started = Started(path, here / "state")
        with ThreadPoolExecutor(1) as pool:  # the router's host is not the racks' business
            installing = pool.submit(install_router_on, started.file, second_rack.inventory,
                                     here)
            began = time.monotonic()
            started.up = invoke("fleet.up", "--engine", "sglang", "--fleet", str(path), "--json")
            started.up_s = time.monotonic() - began
            started.installed = installing.result()
        yield started
        for worker in started.router.workers():
            started.router.drain(worker.url)


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
    lanes.up(inventory, "sglang", "512k")
    steps.append(time.monotonic())
    load = Load(inventory.head.address, 9000, clients=CLIENTS).start()
    try:
        time.sleep(1)
        lanes.roll(inventory, "vllm", "512k")
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
    0's finished + in-flight count at the drain, and again once its in-flight count was 0),
    and every event said."""

    def __init__(self, racks: dict):
        self.racks, self.engine, self.marks, self.arrived = racks, "sglang", {}, {}
        self.said: list[str] = []

    def __call__(self, event: str) -> None:
        self.said.append(event)
        name, _, text = event.partition(": ")
        if name in self.racks and text.startswith("drained in the router"):
            self.marks[name] = sum(counters(self.racks[name], self.engine))
        elif name in self.racks and "in-flight request(s) finished" in text:
            finished, left = counters(self.racks[name], self.engine)
            self.arrived.setdefault(name, []).append(finished + left - self.marks.pop(name))

    def roll(self, fleet, engine: str, profile: str = "512k") -> list[dict]:
        """fleet.roll, watched; FleetStopped as it raises it (every rack on its old engine)."""
        reports = fleet_roll(fleet, engine, profile, on_event=self)
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


def install_router_on(fleet, second, here: Path):
    """`fleet.router.install` of a fleet file whose router is one of rack 2's nodes (it
    reaches rack 2's head; it runs this machine's OS, so it is sent this machine's own
    installed smg: nothing is downloaded): (that fleet, what the install said, the unit's
    state)."""
    from sparkrack.racks.install import UNIT, install_router
    from sparkrack.rehearsal.layout import CLIENT_KEY

    host = second.nodes[-1]
    file = here / "installed.yml"
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
def prometheus(fleet, tmp_path):
    """`invoke monitoring.render --fleet` as an operator runs it, and Debian's Prometheus on
    what it wrote, as written: it scrapes the fleet's router (job sparkrack-router)."""
    out = tmp_path / "monitoring"
    done = invoke("monitoring.render", "--out", str(out), "--fleet", str(fleet.path),
                  "-i", str(fleet.file.racks[0]))
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


def test_fleet_up_serves_both_racks_and_the_router_installs_as_a_service(fleet, second_rack):
    """`fleet.up` started both racks on SGLang through the router (up, smoke, register,
    soak each) and `fleet.status` shows them ready; `fleet.router.install` meanwhile ran
    the router as a systemd service on one of rack 2's nodes, from this machine's own
    installed smg (no download: a test sends no packet off this machine)."""
    assert fleet.up.returncode == 0, fleet.up.stdout + fleet.up.stderr
    assert [(r["rack"], r["serving"], sorted(r["steps"])) for r in json.loads(fleet.up.stdout)
            ] == [(name, "sglang 512k", ["register", "smoke", "soak", "up"])
                  for name in fleet.racks]
    shown = invoke("fleet.status", "--fleet", str(fleet.path))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = table_rows(shown.stdout)
    assert rows[0] == ["rack", "serving", "head api", "health", "router", "load"], rows
    assert [(r[0], r[1], r[3], r[4]) for r in rows[1:]] == [
        (name, "sglang 512k", "200", "ready") for name in fleet.racks], rows
    print(f"\nfleet.up of both racks: {fleet.up_s:.0f} s")
    installed, said, active = fleet.installed
    check_installed(installed, second_rack.inventory, said, active)


def test_fleet_roll_moves_both_racks_and_back_under_load_with_no_failed_request(fleet):
    """Eight streaming clients through the router while `fleet.roll` moves both racks
    SGLang -> vLLM, a roll to a profile whose start fails stops at rack 1 (put back on vLLM,
    registered again, rack 2 untouched), and `fleet.roll` moves both back to SGLang: no
    request fails, every stream ends with its final chunk, none reaches a drained rack;
    each step audited on its rack."""
    racks, router = fleet.racks, fleet.router
    began, timeline = time.monotonic(), []
    drains = Drains(racks)
    overflows = {name: listen_overflows(inv) for name, inv in racks.items()}
    load = Load(fleet.file.router.host, fleet.file.router.port, clients=CLIENTS,
                tokens=TOKENS, timeout=CLIENT_TIMEOUT_S).start()
    try:
        time.sleep(1)
        rolled = [("vllm", r) for r in drains.roll(fleet.file, "vllm")]
        timeline.append((time.monotonic() - began, "fleet.roll vllm"))
        workers = {w.url: w.id for w in router.workers()}
        with pytest.raises(FleetStopped) as stopped:
            drains.roll(fleet.file, "sglang", "broken")
        timeline.append((time.monotonic() - began, "fleet.roll sglang broken: stopped"))
        after_stop = {w.url: w for w in router.workers()}
        rolled += [("sglang", r) for r in drains.roll(fleet.file, "sglang")]
        timeline.append((time.monotonic() - began, "fleet.roll sglang"))
        time.sleep(1)
    finally:
        load.stop()
    overflows = {name: listen_overflows(inv) - overflows[name] for name, inv in racks.items()}
    failed, whole = load.failed(), [o for o in load.outcomes if o.ok]
    took = sorted(o.ended - o.began for o in load.outcomes)
    print(f"\nfleet.roll sglang -> vllm -> (broken) -> sglang under {CLIENTS} streaming "
          f"clients: {load.count()} requests, {len(failed)} failed; each took p50 "
          f"{took[len(took) // 2]:.1f} s, max {took[-1]:.1f} s (the answer began after at most "
          f"{max(o.answered - o.began for o in load.outcomes):.1f} s); SYNs the heads' "
          f"listen queues dropped: {overflows}")
    for seconds, step in timeline:
        print(f"  {seconds:6.1f} s  {step}")
    for target, report in rolled:
        print(f"  to {target}: {report}")

    assert failed == [], [(round(f.began - began, 1), f.why) for f in failed]
    assert len(whole) > 10 * CLIENTS
    assert drains.arrived == {"rehearsal": [0, 0, 0], "rehearsal-2": [0, 0]}, drains.arrived
    assert [(t, r["rack"], r["serving"]) for t, r in rolled] == [
        ("vllm", "rehearsal", "vllm 512k"), ("vllm", "rehearsal-2", "vllm 512k"),
        ("sglang", "rehearsal", "sglang 512k"), ("sglang", "rehearsal-2", "sglang 512k")]
    assert all(r["soak_requests"] > 0 and r["soak_failed"] == 0 for _, r in rolled), rolled
    # rack 2 on SGLang's 512k lane runs 2 requests at once (--max-running-requests): with
    # the 8 clients in flight, the capacity check warns before rack 1's first drain
    first = list(itertools.takewhile(lambda e: "drained in the router" not in e, drains.said))
    assert any(re.fullmatch(r"rehearsal: warning: \d+ request\(s\) will queue on rehearsal-2 "
                            r"while rehearsal rolls: \d+ in flight in the router, rehearsal-2 "
                            r"runs 2 at once \(--max-running-requests\)", e) for e in first), first
    assert rolled[0][1]["warning"] is not None, rolled
    # the failed roll: rack 1 back on vLLM and registered again, rack 2 never touched
    assert stopped.value.line().startswith("fleet.roll stopped at rehearsal: roll to sglang "
                                           "broken failed"), stopped.value.line()
    assert "it serves vllm 512k, registered in the router again; the racks after it were " \
        "not rolled" in stopped.value.line(), stopped.value.line()
    one, two = (f"http://{racks[n].head.address}:{PORTS['vllm']}" for n in racks)
    assert set(after_stop) == {one, two} and all(
        w.status == "ready" and w.healthy for w in after_stop.values()), after_stop
    assert after_stop[one].id != workers[one] and after_stop[two].id == workers[two]
    audited = {name: [r["outcome"] for r in sorted(audit_tasks(fleet.state, "fleet.roll"),
                                                   key=lambda r: r["ts"]) if r["rack"] == name]
               for name in racks}
    assert audited == {"rehearsal": ["ok", "failed", "ok"], "rehearsal-2": ["ok", "ok"]}


def test_a_powered_off_head_fails_only_its_in_flight_requests_then_fleet_down(
        fleet, second_rack, prometheus):
    """Rack 2's head loses power under the load: the router takes it out of rotation
    before a request sent after the cut could spend all its attempts on it; the only
    requests that fail are those it had in flight when the power went (the router's own
    count), none sent after; `fleet.status` shows it. The router's dashboard panels answer
    from a real Prometheus; `fleet.down` takes both racks out of the router and stops
    them."""
    router, second = fleet.router, second_rack.inventory
    url = f"http://{second.head.address}:{PORTS['sglang']}"
    load = Load(fleet.file.router.host, fleet.file.router.port, clients=CLIENTS,
                tokens=TOKENS, timeout=CLIENT_TIMEOUT_S).start()
    try:
        time.sleep(3)
        sent, on_it = sent_to(router, url), router.worker(url).load
        cut = time.monotonic()
        second_rack.poweroff(second.head.name)
        on_it += sent_to(router, url) - sent  # sent there between the two readings
        while (worker := router.worker(url)) is not None and worker.healthy \
                and time.monotonic() - cut < 30:
            time.sleep(0.2)
        out = time.monotonic() - cut
        dead = invoke("fleet.status", "--fleet", str(fleet.path))  # the load on rack 1 alone
    finally:
        load.stop()
    with ThreadPoolExecutor(1) as pool:  # the head boots while Prometheus scrapes on
        booting = pool.submit(power_on, second_rack, second.head.name)
        answered = router_panels(prometheus, fleet.file.name)
        booting.result()
    errors = {r["metric"].get("error_type") for r in answered["Router errors/s"]}
    down = invoke("fleet.down", "--fleet", str(fleet.path), "--json")
    failed, whole = load.failed(), [o for o in load.outcomes if o.ok]
    after = [o for o in load.outcomes if o.began >= cut]
    print(f"\npowered-off head under {CLIENTS} streaming clients: out of rotation after "
          f"{out:.1f} s; {load.count()} requests, {len(failed)} failed ({on_it} in flight on "
          f"it when the power went); {len(after)} sent after, slowest "
          f"{max(o.ended - o.began for o in after):.1f} s; router errors: {sorted(errors)}")

    assert worker is None or not worker.healthy
    # out of rotation before a request sent just after the cut could have spent all its
    # attempts on the dead head (each one connect timeout): none sent after the cut fails
    assert out < SMG_ATTEMPTS * fleet.file.router.connect_timeout_s, out
    assert [f for f in failed if f.began >= cut or f.ended < cut] == [], \
        [(round(f.began - cut, 2), f.why) for f in failed]
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
        (name, True) for name in fleet.racks]
    assert [w for w in router.workers() if w.status != "draining"] == []
    rows, _ = fleet_status(fleet.file)
    assert [(r.rack, r.serving) for r in rows] == [(name, None) for name in fleet.racks]
