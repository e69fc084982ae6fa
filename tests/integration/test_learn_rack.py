"""`engines.learn`'s container on a rehearsal node's dockerd (issue 53 item 3): created with
its limits (the HostConfig docker keeps), held to them inside (what the kernel shows the
program: its capabilities, no_new_privs, its cgroup's CPU, memory and pids limits), and
its output read no further than OUTPUT_LIMIT, in one line and nothing learned."""

from __future__ import annotations

import json
import threading
import time

import pytest
from provision_helpers import inventory_copy

import sparkrack.learn.options as learn_module
from sparkrack.fleet import Fleet
from sparkrack.fleet.containers import OutputTooLong
from sparkrack.learn.options import LABEL, LIMITS, OUTPUT_LIMIT, LearnFailed, learn

pytestmark = pytest.mark.rack

# what the program in the container sees of its own limits: its cgroup's files, cgroup v2's
# (DGX OS) or v1's (this machine's kernel, which the rehearsal nodes share) alike
PROBE = r"""
import json, time
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
def first(*names):
    for name in names:
        try:
            return open("/sys/fs/cgroup/" + name).read().strip()
        except OSError:
            pass
    return None
cpu = first("cpu.max")
if cpu is None:
    cpu = "%s %s" % (first("cpu/cpu.cfs_quota_us", "cpu,cpuacct/cpu.cfs_quota_us"),
                     first("cpu/cpu.cfs_period_us", "cpu,cpuacct/cpu.cfs_period_us"))
print(json.dumps({"CapEff": status["CapEff"].strip(), "CapBnd": status["CapBnd"].strip(),
                  "NoNewPrivs": status["NoNewPrivs"].strip(), "cpu.max": cpu,
                  "memory.max": first("memory.max", "memory/memory.limit_in_bytes"),
                  "pids.max": first("pids.max", "pids/pids.max")}))
time.sleep(4)  # while the test reads the container's HostConfig
"""


def host_config_while_it_runs(inventory, name: str, found: dict, stop: threading.Event):
    """Record the HostConfig of the container called name once docker lists it."""
    with Fleet(inventory, [inventory.head]) as fleet:
        client = fleet.docker_client(inventory.head)
        while not stop.is_set():
            for container in client.containers.list(all=True, filters={"name": name}):
                found.update(container.attrs["HostConfig"])
                return
            time.sleep(0.2)


def test_the_learn_container_is_held_to_its_limits_by_the_nodes_dockerd(engine_rack):
    inventory = engine_rack
    image = inventory.vars.images["sglang"]
    name = f"sparkrack-learn-probe-{int(time.time())}"
    host_config: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=host_config_while_it_runs,
                               args=(inventory, name, host_config, stop), daemon=True)
    watcher.start()
    try:
        with Fleet(inventory, [inventory.head]) as fleet:
            code, out, err = fleet.docker(inventory.head).run_to_end(
                image, ["python3", "-c", PROBE], name=name, files={}, timeout=120,
                labels={LABEL: "probe"}, limits=LIMITS, output_limit=OUTPUT_LIMIT)
    finally:
        stop.set()
        watcher.join(30)
    assert code == 0, err
    inside = json.loads(out)
    assert inside == {"CapEff": "0000000000000000", "CapBnd": "0000000000000000",
                      "NoNewPrivs": "1", "cpu.max": "200000 100000",
                      "memory.max": str(2 << 30), "pids.max": "64"}, inside
    assert {key: host_config.get(key) for key in (
        "NanoCpus", "CapDrop", "SecurityOpt", "LogConfig", "Memory", "MemorySwap",
        "PidsLimit")} == {
        "NanoCpus": 2_000_000_000, "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
        "LogConfig": {"Type": "json-file", "Config": {"max-size": "4m", "max-file": "2"}},
        "Memory": 2 << 30, "MemorySwap": 2 << 30, "PidsLimit": 64}, host_config


def test_an_image_printing_too_much_is_cut_and_nothing_is_learned(engine_rack, tmp_path,
                                                                   monkeypatch):
    inventory = inventory_copy(engine_rack.path, tmp_path / "rack")
    image = inventory.vars.images["sglang"]
    loud = ["python3", "-c", "import sys\nfor _ in range(100): sys.stdout.write('x' * 99999 + "
            "'\\n')"]  # 10 MB in 100 lines: over the limit, and over what dockerd keeps
    with Fleet(inventory, [inventory.head]) as fleet:
        with pytest.raises(OutputTooLong, match=f"printed over {OUTPUT_LIMIT:,} bytes on stdout"):
            fleet.docker(inventory.head).run_to_end(
                image, loud, name=f"sparkrack-learn-loud-{int(time.time())}", files={},
                timeout=120, labels={LABEL: "probe"}, limits=LIMITS, output_limit=OUTPUT_LIMIT)
    before = sorted(str(p) for p in inventory.path.rglob("*"))
    monkeypatch.setattr(learn_module, "extractor_argv", lambda folder, *args: loud)
    with pytest.raises(LearnFailed) as failed:
        learn(inventory, "sglang")
    assert failed.value.line() == (
        f"python3 in {image} on spark-01 printed over {OUTPUT_LIMIT:,} bytes on stdout (read "
        "no further): not an option table, nothing learned (an option table is some KiB: is "
        f"{image} the sglang image it says it is?)")
    assert sorted(str(p) for p in inventory.path.rglob("*")) == before
    with Fleet(inventory, [inventory.head]) as fleet:  # the containers went with the runs
        left = fleet.docker_client(inventory.head).containers.list(
            all=True, filters={"label": LABEL})
    assert left == []
