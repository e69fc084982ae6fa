"""A fleet of two rehearsal racks behind one router (SMG) on this machine: the second rack
boots beside the session's (its own addresses, bridges, cgroups and state) for this module
only, and the router runs as `rehearsal.up --racks 2` starts it. A steady load of streaming
clients runs through each scenario and every request's outcome is counted. docs/fleet.md"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rackhealth
import rackns
import yaml
from fleetload import Load
from provision_helpers import inventory_copy
from stubgroup import quick_burn

from sparkrack.deployments.headapi import Endpoint, parse_prometheus
from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.racks.fleetfile import load_fleet
from sparkrack.racks.roll import fleet_roll, fleet_up
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


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


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
def fleet(engine_rack, second_rack):
    """The rehearsal fleet, both racks serving SGLang and registered in the router; each
    rack back to nothing at the end."""
    chosen = load_fleet(fleet_file(engine_rack.path))
    fleet_up(chosen, "sglang", "512k", burn=quick_burn)
    yield chosen
    router = Router(chosen.router)
    for worker in router.workers():
        router.drain(worker.url)
    for inventory in chosen.inventories():
        lanes.down(inventory)


def counters(inventory, engine: str) -> tuple[float, float]:
    """(requests finished, requests in flight) on the rack's rank 0, from one scrape."""
    _, body = Endpoint(inventory.head, PORTS[engine]).get("/metrics")
    values = parse_prometheus(body.decode())
    if engine == "sglang":
        return (values.get("sglang:num_requests_total", 0.0),
                values["sglang:num_running_reqs"] + values["sglang:num_queue_reqs"])
    return (values.get("vllm:request_success_total", 0.0),
            values["vllm:num_requests_running"] + values["vllm:num_requests_waiting"])


def test_fleet_roll_moves_both_racks_and_back_with_no_failed_request(fleet):
    racks = {inv.vars.rack_name: inv for inv in fleet.inventories()}
    engine = {"name": "sglang"}
    arrived: dict = {}  # rack -> requests that reached it after the router's drain
    marks: dict = {}
    events: list[tuple[float, str]] = []

    def watch(event: str) -> None:
        events.append((time.monotonic(), event))
        name, _, text = event.partition(": ")
        if name in racks and text.startswith("drained in the router"):
            marks[name] = sum(counters(racks[name], engine["name"]))
        elif name in racks and "in-flight request(s) finished" in text:
            finished, left = counters(racks[name], engine["name"])
            arrived.setdefault(name, []).append(finished + left - marks.pop(name))

    rows, problem = fleet_status(fleet)  # what `fleet.status` shows
    assert problem is None and [(r.rack, r.serving, r.health, r.router) for r in rows] == [
        ("rehearsal", "sglang 512k", 200, "ready"), ("rehearsal-2", "sglang 512k", 200, "ready")]
    load = Load(fleet.router.host, fleet.router.port, clients=CLIENTS).start()
    began = time.monotonic()
    try:
        timeline = []
        for target in ("vllm", "sglang"):
            reports = fleet_roll(fleet, target, "512k", burn=quick_burn, on_event=watch)
            engine["name"] = target
            timeline += [(target, report.as_dict()) for report in reports]
    finally:
        load.stop()
    seconds = time.monotonic() - began
    failed = load.failed()
    print(f"\nfleet.roll sglang -> vllm -> sglang under {CLIENTS} streaming clients: "
          f"{load.count()} requests in {seconds:.0f} s, {len(failed)} failed")
    for target, report in timeline:
        print(f"  to {target}: {report}")
    assert load.count() > 4 * CLIENTS and failed == [], failed[:5]
    assert arrived == {name: [0, 0] for name in racks}, arrived  # none reached a drained rack
    assert [(t, r["serving"]) for t, r in timeline] == [
        ("vllm", "vllm 512k"), ("vllm", "vllm 512k"), ("sglang", "sglang 512k"),
        ("sglang", "sglang 512k")]


def test_a_plain_roll_of_one_rack_without_the_router_fails_requests(engine_rack, tmp_path):
    """The same load straight at one rack's head (api_port: one address for both lanes)
    while `roll` moves it from SGLang to vLLM: requests fail, so the test above can."""
    inventory = inventory_copy(engine_rack.path, tmp_path / "rack", api_port=9000,
                               drain_budget_s=3)
    lanes.up(inventory, "sglang", "512k", burn=quick_burn)
    load = Load(inventory.head.address, 9000, clients=CLIENTS).start()
    try:
        time.sleep(2)
        lanes.roll(inventory, "vllm", "512k", burn=quick_burn)
        time.sleep(2)
    finally:
        load.stop()
        lanes.down(inventory)
    failed = load.failed()
    print(f"\nplain roll without the router: {load.count()} requests, {len(failed)} failed; "
          f"first: {failed[0].why if failed else '-'}")
    assert failed


def test_a_powered_off_head_leaves_the_rotation_and_only_its_requests_fail(fleet, second_rack):
    """Rack 2's head loses power under load: the router's health checks take it out of
    rotation; the requests that fail are those it had in flight when the power went (the
    router's own count), none sent after."""
    router = Router(fleet.router)
    second = second_rack.inventory
    url = f"http://{second.head.address}:{PORTS['sglang']}"
    load = Load(fleet.router.host, fleet.router.port, clients=CLIENTS).start()
    try:
        time.sleep(3)
        before = router.worker(url).load  # requests the router has in flight on rack 2
        cut = time.monotonic()
        second_rack.poweroff(second.head.name)
        on_it = max(before, router.worker(url).load)  # one may have arrived meanwhile
        deadline = time.monotonic() + 30
        while (worker := router.worker(url)) is not None and worker.healthy \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        out = time.monotonic() - cut
        time.sleep(3)  # the load on rack 1 alone
    finally:
        load.stop()
        second_rack.poweron(second.head.name)
        second_rack.wait_booted([second_rack.node(second.head.name)])
    failed = load.failed()
    after = [o for o in load.outcomes if o.began > cut + out]
    print(f"\npowered-off head: out of rotation after {out:.1f} s; {load.count()} requests, "
          f"{len(failed)} failed, {on_it} in flight on it when the power went; "
          f"{len(after)} sent after, all whole: {all(o.ok for o in after)}")
    assert worker is None or not worker.healthy
    assert all(f.began < cut for f in failed), [(f.began - cut, f.why) for f in failed]
    assert len(failed) <= on_it, [f.why for f in failed]
    assert after and all(o.ok for o in after)


def test_router_install_runs_smg_as_a_service_on_the_fleet_files_host(fleet, second_rack,
                                                                      tmp_path, monkeypatch):
    """`fleet.router.install` onto one of rack 2's nodes (it reaches rack 2's head): the
    pinned smg in a venv there, a systemd unit with the fleet file's port and policy, its
    API answering, a head registered and ready through it."""
    from sparkrack.racks.install import UNIT, install_router
    from sparkrack.rehearsal.layout import CLIENT_KEY

    second = second_rack.inventory
    host = second.nodes[-1]
    file = tmp_path / "fleet.yml"
    file.write_text(yaml.safe_dump({
        "name": "installed", "racks": [str(fleet.racks[0]), str(fleet.racks[1])],
        "router": {"host": host.address, "port": 30090, "metrics_port": 29090,
                   "ssh_key": str(CLIENT_KEY), "known_hosts": str(second.known_hosts_path),
                   "health_check_interval_s": 1}}))
    installed = load_fleet(file)
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    wheels = tmp_path / "state" / "router-wheels" / f"{platform.machine()}-cp311"
    got = subprocess.run(rackns.outside(  # this run's network has no index: the operator's
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary",
         ":all:", "--dest", str(wheels), "smg==1.13.0", "setproctitle"]),
        capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr
    said: list[str] = []
    try:
        install_router(installed, on_event=said.append)
        with Fleet(second, [host]) as node:
            active = node.run(["systemctl", "is-active", UNIT])[host.name].stdout.strip()
        router = Router(installed.router)
        url = f"http://{second.head.address}:{PORTS['sglang']}"
        router.register(url)
        assert router.wait_ready(url, 60).healthy
    finally:
        with Fleet(second, [host]) as node:
            node.run(["sh", "-c", 'systemctl disable --now "$1"; rm -rf /opt/sparkrack-router '
                      '"/etc/systemd/system/$1"; systemctl daemon-reload', "sh", UNIT])
    assert active == "active", said
    assert any("sending " in line and "smg-1.13.0-" in line for line in said), said
