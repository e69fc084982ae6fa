"""`invoke up / down / roll / watch` on the rehearsal rack with the stub engines."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from stubgroup import Lines, nothing_runs

from sparkrack.data import shipped
from sparkrack.deployments.record import read as read_records
from sparkrack.engines import build_specs, lane_specs, resolve_lane
from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.lifecycle.start import StartFailed
from sparkrack.watchdog.watch import watch_group

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
SEED_ENV = {"SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION": "0.01",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"}
SEED_FLAGS = ("--context-length 524288 --mem-fraction-static 0.80 --max-running-requests 2 "
              "--chunked-prefill-size 4096 --kv-cache-dtype fp8_e4m3 --speculative-algorithm EAGLE "
              "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
              "--cuda-graph-max-bs-decode 4").split()




@pytest.fixture
def clean(engine_rack):
    """Every test starts and ends with no engine on the rack."""
    lanes.down(engine_rack)
    yield engine_rack
    lanes.down(engine_rack)
    assert nothing_runs(engine_rack) == []


def docker_events(inventory, since: float, until: float,
                  deployment: str) -> list[tuple[int, str, int]]:
    """(time ns, action, rank) of every start/kill/die of the deployment's containers, from
    each dockerd (the nodes share this machine's clock, so the order across nodes is real).
    Whole seconds bound the query, so an earlier test's containers are filtered out by the
    deployment label, and an event reported twice counts once."""
    events = set()
    with Fleet(inventory) as fleet:
        for node in fleet.nodes:
            stream = fleet.docker_client(node).events(
                since=int(since), until=int(until) + 1, decode=True,
                filters={"type": "container", "event": ["start", "kill", "die"],
                         "label": [f"sparkrack.deployment={deployment}"]})
            events |= {(e["timeNano"], e["Action"], int(e["Actor"]["Attributes"]["sparkrack.rank"]),
                        e["Actor"]["ID"]) for e in stream}
    return [(t, action, rank) for t, action, rank, _ in sorted(events)]


def test_up_runs_the_exact_profile_in_order_and_down_leaves_nothing(clean):
    inventory = clean
    t0 = time.time()
    deployment = lanes.up(inventory, "sglang", "512k")
    specs = build_specs(inventory, "sglang", "512k")
    with Fleet(inventory) as fleet:
        for spec in specs:
            attrs = fleet.docker_client(spec.node).containers.get(spec.container_name).attrs
            argv = attrs["Config"]["Entrypoint"] + attrs["Config"]["Cmd"]
            assert argv == list(spec.argv)
            env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
            assert SEED_ENV.items() <= env.items()
            assert {k: v for k, v in env.items() if k in spec.env} == dict(spec.env)
            for flag, value in zip(SEED_FLAGS[::2], SEED_FLAGS[1::2], strict=False):
                assert argv[argv.index(flag) + 1] == value
            assert "--disable-flashinfer-autotune" in argv
            assert attrs["HostConfig"]["NetworkMode"] == "host" and attrs["HostConfig"]["IpcMode"] == "host"
        records = read_records(fleet, inventory)
    assert records["last-good"].deployment_id == deployment.deployment_id
    with pytest.raises(lanes.Refused) as refused:  # one engine at a time
        lanes.up(inventory, "vllm", "512k")
    assert "no other engine: sglang 512k rank 0 runs on spark-01" in refused.value.line()
    assert "MemAvailable" not in refused.value.line()  # held by that engine: not a second reason
    report = lanes.down(inventory)
    t1 = time.time()
    assert report.not_recovered == {} and report.errors == {}
    assert nothing_runs(inventory) == []
    events = docker_events(inventory, t0, t1, deployment.deployment_id)
    starts = [rank for _, action, rank in events if action == "start"]
    kills = [(t, rank) for t, action, rank in events if action == "kill"]
    head_died = next(t for t, action, rank in events if action == "die" and rank == 0)
    assert sorted(starts[:7]) == [1, 2, 3, 4, 5, 6, 7] and starts[7] == 0  # workers, then the head
    assert kills[0][1] == 0  # the head is signalled first, so it drains ...
    assert all(t > head_died for t, rank in kills if rank != 0)  # ... workers only after it exited
    assert sorted(rank for _, action, rank in events if action == "die") == list(range(8))
    with Fleet(inventory) as fleet:
        leftovers = fleet.run(["sh", "-c", "pgrep -af '[l]aunch_server|[v]llm serve' || true"])
        assert leftovers.all_ok and [r.stdout for r in leftovers] == [""] * 8
        assert read_records(fleet, inventory)["current"] is None


def test_a_worker_killed_during_load_fails_up_fast_and_leaves_nothing(clean):
    inventory = clean
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {"load_delay_s": 8, "tokens_per_s": 50})
    killed = {}

    def kill_rank_3():
        with Fleet(inventory, inventory.select("spark-04")) as fleet:
            client = fleet.docker_client("spark-04")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    c = client.containers.get("sparkrack-sglang-r3")
                    if c.status == "running":
                        time.sleep(0.5)
                        c.kill()
                        killed["at"] = time.monotonic()
                        return
                except Exception:
                    pass
                time.sleep(0.2)

    killer = threading.Thread(target=kill_rank_3)
    try:
        killer.start()
        with pytest.raises(StartFailed) as failure:
            lanes.up(inventory, "sglang", "512k")
        failed_at = time.monotonic()
        killer.join()
    finally:
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50})
    assert failed_at - killed["at"] < 10
    assert "rank" in failure.value.line() and "spark-" in failure.value.line()
    assert nothing_runs(inventory) == []


def broken_inventory(tmp_path) -> Path:
    """A copy of the rehearsal inventory whose sglang has a profile every rank rejects."""
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    (inv / ".sparkrack" / "engines").mkdir(parents=True)
    engine = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    engine["profiles"]["broken"] = {"description": "a value SGLang refuses: every rank exits 2",
                                    "extends": "512k",
                                    "flags": {"--speculative-algorithm": "NO-SUCH-ALGORITHM"}}
    (inv / ".sparkrack" / "engines" / "sglang.yml").write_text(yaml.safe_dump(engine, sort_keys=False))
    return inv  # vllm comes from the package's engines


def test_roll_vllm_to_sglang_and_a_broken_roll_falls_back(clean, tmp_path):
    inventory = load_inventory(broken_inventory(tmp_path))
    lanes.up(inventory, "vllm", "512k")
    with pytest.raises(lanes.RollFailed) as failure:  # across engines, back to the old one
        lanes.roll(inventory, "sglang", "broken")
    assert "rolled back to the last known-good deployment: vllm 512k" in failure.value.line()
    running = nothing_runs(inventory)
    assert {(r.engine, r.profile) for r in running} == {("vllm", "512k")} and all(r.alive for r in running)
    rolled = lanes.roll(inventory, "sglang", "512k")
    assert rolled.engine == "sglang"
    running = nothing_runs(inventory)
    assert {r.engine for r in running} == {"sglang"} and len(running) == 8 and all(r.alive for r in running)


def test_down_drains_rank_0_first_and_audits_what_it_drained(clean, tmp_path):
    """`down` while a vLLM stream runs: SIGTERM to rank 0 alone (vLLM's --shutdown-timeout
    is the inventory's drain budget), the stream ends with its final chunk, then the ranks
    stop in order; the audit record says how many requests were drained and how long."""
    from sparkrack.deployments.headapi import Endpoint

    inventory = clean
    lanes.up(inventory, "vllm", "512k")
    head = Endpoint(inventory.head, 8000, "GLM-5.3")
    streamed: dict = {}
    reader = threading.Thread(target=lambda: streamed.update(result=head.stream_chat(
        [{"role": "user", "content": "drain me"}], 600, timeout=60)))  # 12 s at 50 tokens/s:
    # in flight still when `down`'s process, slow to start on a busy machine, sends SIGTERM
    reader.start()
    deadline = time.monotonic() + 30
    while "vllm:num_requests_running{model_name=\"GLM-5.3\"} 1" not in \
            head.get("/metrics")[1].decode() and time.monotonic() < deadline:
        time.sleep(0.1)
    env = {**os.environ, "SPARKRACK_INVENTORY": str(inventory.path), "NO_COLOR": "1",
           "SPARKRACK_STATE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "invoke", "down"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    reader.join(60)
    assert done.returncode == 0, done.stdout + done.stderr
    result = streamed["result"]
    assert (result.completion_tokens, result.finish_reason) == (600, "length")
    assert "draining rank 0 on spark-01: SIGTERM sent, /health answers 200, 1 request(s) " \
           "in flight, budget 120 s" in done.stderr, done.stderr
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    drain = next(entry["changed"]["drain"] for entry in reversed(audit)
                 if (entry.get("changed") or {}).get("drain"))
    assert (drain["in_flight"], drain["drained"], drain["left"], drain["budget_s"]) == \
        (1, 1, 0, 120), drain
    assert drain["ended"] in ("drained", "exited") and 0 < drain["seconds"] < 30, drain
    assert nothing_runs(inventory) == []


def test_a_roll_between_lanes_keeps_the_racks_api_port(clean, tmp_path):
    """api_port 9000: SGLang and vLLM both serve there (not 30000 / 8000), `status` says
    so, and a roll from one to the other keeps the address for the rack's clients."""
    from provision_helpers import inventory_copy

    from sparkrack.deployments.headapi import Endpoint

    inventory = inventory_copy(REPO / "inventory" / "rehearsal", tmp_path / "rack", api_port=9000)
    api = Endpoint(inventory.head, 9000, "GLM-5.3")

    def serving() -> str:
        status = subprocess.run([sys.executable, "-m", "invoke", "status", "--json", "-i",
                                 str(inventory.path)], cwd=REPO, capture_output=True,
                                text=True, timeout=60, env={**os.environ, "SPARKRACK_SANDBOX": "1"})
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["api"] == f"http://{inventory.head.address}:9000/v1"
        return api.get_json("/v1/models")["data"][0]["owned_by"]

    lanes.up(inventory, "sglang", "512k")
    assert serving() == "sglang"
    assert Endpoint(inventory.head, 30000).status("/health") is None  # not the engine's own
    lanes.roll(inventory, "vllm", "512k")
    assert serving() == "vllm"
    assert api.chat([{"role": "user", "content": "one two"}], 3)["choices"]


def test_watch_stops_the_group_when_a_node_is_cut(clean, rack):
    inventory = clean
    lanes.up(inventory, "sglang", "512k")
    result, events, watching, broken = {}, [], threading.Event(), threading.Event()

    def on_event(line):
        events.append(line)
        (broken if line.startswith("group broken") else watching).set()

    def run_watch():
        result["report"] = watch_group(inventory, duration=120,
                                       interval=0.5, on_event=on_event)

    watcher = threading.Thread(target=run_watch)
    watcher.start()
    assert watching.wait(60), events  # "watching sglang 512k: 8 ranks"
    cut_at = time.monotonic()
    rack.cut("spark-06")
    try:
        reacted = broken.wait(60) and time.monotonic() - cut_at
    finally:
        rack.heal("spark-06")
    watcher.join(timeout=90)
    report = result["report"]
    assert "spark-06" in report.failure and report.acted == "stopped", events
    assert reacted and reacted < 15, events
    # the cut node's rank keeps running (as a real one would, until its own NCCL watchdog):
    # the watch stops it as soon as the node answers again, and says so
    assert any(line.startswith("spark-06 answers again: rank 5 ") for line in events), events
    assert report.left_running == []
    assert nothing_runs(inventory) == []


def test_sigint_during_up_leaves_nothing_running(clean):
    inventory = clean
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {"load_delay_s": 30, "tokens_per_s": 50})
    try:
        proc = subprocess.Popen([sys.executable, "-m", "invoke", "up", "--engine", "sglang",
                                 "-i", "inventory/rehearsal"], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "SPARKRACK_SANDBOX": "1"})
        said = Lines(proc.stderr)
        # every rank started, rank 0 last; the stub's load then takes 30 s: Ctrl-C lands in it
        started = said.wait_for("started rank(s) 0", 180)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        err = said.text()
    finally:
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50})
    assert started, err
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert nothing_runs(inventory) == []


def test_up_refuses_an_uncapped_node_and_names_it(clean):
    inventory = clean
    with Fleet(inventory, inventory.select("spark-03")) as fleet:
        fleet.run(["nvidia-smi", "-rgc"]).raise_for_failures()
        try:
            with pytest.raises(lanes.Refused) as refused:
                lanes.up(inventory, "sglang", "512k")
        finally:
            fleet.run(["nvidia-smi", "-lgc", f"0,{inventory.vars.clock_cap_mhz}"]).raise_for_failures()
    assert "clock cap: spark-03" in refused.value.line()
    assert "power:" in refused.value.line() and "spark-03 uncapped" in refused.value.line()
    assert nothing_runs(inventory) == []
    lanes.up(inventory, "sglang", "512k")  # starts once the cap is back


@pytest.mark.parametrize("budget, warns", [("0.2", True), ("0.01", False)])
def test_watch_warns_about_the_indexer_ratchet_only_without_the_budget(clean, tmp_path, budget, warns):
    """Growing prompts: with SGLang's default indexer budget the stub keeps its scratch and
    MemAvailable ratchets down; with 0.01 it comes back after every request."""
    from sparkrack.deployments.headapi import Endpoint
    from sparkrack.lifecycle.start import start_group
    from sparkrack.lifecycle.stop import stop_engine
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    inv_dir = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv_dir)
    vars_file = inv_dir / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text().replace("indexer_mem_fraction: 0.01",
                                                       f"indexer_mem_fraction: {budget}"))
    inventory = load_inventory(inv_dir)
    lane = resolve_lane(inventory, "sglang", "512k")
    specs = lane_specs(inventory, lane, deployment_id=f"leak-{budget}")
    head = inventory.node(specs[0].node)
    result = {}
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 200, "indexer_scale": 8,
                                 "prefill_tokens_per_s": 50000})  # requests shorter than the level window
        try:
            start_group(fleet, inventory, specs, serving=lane.serving)
            watcher = threading.Thread(target=lambda: result.update(report=watch_group(
                inventory, duration=16, interval=0.5)))
            watcher.start()
            time.sleep(1.5)
            for words in (2000, 4000, 8000, 16000):
                Endpoint(head, 30000, "GLM-5.3").chat([{"role": "user", "content": "word " * words}],
                                                      max_tokens=4)
                time.sleep(2.5)  # longer than the detector's level window
            watcher.join(timeout=60)
        finally:
            stop_engine(fleet, timeout=5, recovery_timeout=30)
            write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50})
    report = result["report"]
    assert report.failure is None
    ratchet = [w for w in report.warnings if "ratcheting down" in w]
    if warns:
        assert ratchet and "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION" in ratchet[0]
    else:
        assert ratchet == []


def test_a_node_lost_during_load_fails_up_fast_and_the_rest_is_stopped(clean, rack):
    inventory = clean
    from sparkrack.lifecycle.start import NodeLost
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {"load_delay_s": 20, "tokens_per_s": 50})
    cut = {}

    def cut_spark_07_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "at" not in cut:
            if sum(r.alive for r in nothing_runs(inventory)) == 8:
                rack.cut("spark-07")
                cut["at"] = time.monotonic()
            time.sleep(0.3)

    cutter = threading.Thread(target=cut_spark_07_once_running)
    try:
        cutter.start()
        with pytest.raises(NodeLost) as lost:
            lanes.up(inventory, "sglang", "512k")
        failed_at = time.monotonic()
        cutter.join()
    finally:
        rack.heal("spark-07")
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 1, "tokens_per_s": 50})
    assert failed_at - cut["at"] < 15
    assert "node spark-07 lost during the start" in lost.value.line()
    others = [r for r in nothing_runs(inventory) if r.node != "spark-07"]
    assert others == []  # every rank on the nodes still answering was stopped and removed


def test_down_with_a_cut_node_ends_in_seconds_and_a_later_down_clears_its_rank(clean, rack):
    """Found by the chaos run (seed 1, step 27: `down` with spark-05 cut took 76 s, waiting
    out the memory timeout for a node it had already found unreachable; the next `down`
    took 120 s more: spark-05's worker, cut off from its rank 0, ignored SIGTERM to the end
    of its stop timeout)."""
    inventory = clean
    lanes.up(inventory, "sglang", "512k")
    rack.cut("spark-05")
    try:
        started = time.monotonic()
        report = lanes.down(inventory)
        took = time.monotonic() - started
    finally:
        rack.heal("spark-05")
    assert took < 20, took
    # spark-05 is named, whether its docker could not be asked or its rank not be stopped
    assert [k for k in report.errors if k.split("@")[-1] == "spark-05"] == list(report.errors)
    assert len(report.errors) == 1
    assert "unreachable" in report.not_recovered["spark-05"]
    assert {r.node for r in report.stopped} - {"spark-05"} == {
        n.name for n in inventory.nodes if n.name != "spark-05"}
    started = time.monotonic()
    again = lanes.down(inventory)  # its rank 0 is gone: SIGKILL after 10 s, not 120
    assert [r.node for r in again.stopped] == ["spark-05"] and not again.errors
    assert time.monotonic() - started < 30
    assert nothing_runs(inventory) == []
