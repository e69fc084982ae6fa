#!/usr/bin/env python3
"""Orchestration overhead of the engine lifecycle on the rehearsal rack.

- `up`: seconds from the command to a healthy head, minus the stub's configured load delay
  (the part a real 744B load would replace), split into gates and start+readiness;
- `down`: ordered stop, removal and memory recovery;
- dead-rank detection: seconds from `docker kill` of one worker to `watch` reporting it.
The peer in the same run is a bare loop that does the same container work with the docker
SDK and no gates, order or checks. Targets: overhead under 3 s, detection under 5 s.
Needs root, `invoke rehearsal.up` and `invoke provision -i inventory/rehearsal`.

    python benchmarks/lifecycle.py [--load-delay 2]
"""

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkrack.deployments.headapi import Endpoint  # noqa: E402
from sparkrack.deployments.ranks import parallel  # noqa: E402
from sparkrack.engines import build_specs, docker_sdk_kwargs  # noqa: E402
from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.lifecycle import (
    lanes,  # noqa: E402
    nodelimits,  # noqa: E402
)
from sparkrack.rehearsal.stub.modeldir import write_stub_model  # noqa: E402
from sparkrack.safety import gateburn  # noqa: E402
from sparkrack.watchdog.watch import watch_group  # noqa: E402


def bare_up_down(inventory, load_delay: float) -> tuple[float, float]:
    """The peer: create+start all ranks in parallel, poll the head, kill+remove. No gates."""
    specs = build_specs(inventory, "sglang", "512k", deployment_id="bench-bare")
    with Fleet(inventory) as fleet:
        limits = nodelimits.probe(fleet)
        started = time.monotonic()

        def run(spec):
            kwargs, _ = nodelimits.fit_kwargs(docker_sdk_kwargs(spec), limits[spec.node])
            kwargs.pop("detach", None)
            fleet.docker_client(spec.node).containers.create(**kwargs).start()

        parallel(specs, run)
        head = inventory.node(specs[0].node)
        while Endpoint(head, 30000).status("/health") != 200:
            time.sleep(0.2)
        up = time.monotonic() - started - load_delay
        started = time.monotonic()
        parallel(specs, lambda s: fleet.docker_client(s.node).containers.get(s.container_name).remove(force=True))
        return up, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-delay", type=float, default=2.0)
    args = parser.parse_args()
    inventory = load_inventory(Path(__file__).resolve().parent.parent / "inventory" / "rehearsal")
    gateburn.SETTINGS = gateburn.BurnSettings(gate_seconds=1)  # the gates burn 1 s here
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {"load_delay_s": args.load_delay, "tokens_per_s": 50})
    lanes.down(inventory)

    events: list[tuple[float, str]] = []
    started = time.monotonic()
    lanes.up(inventory, "sglang", "512k",
             on_event=lambda e: events.append((time.monotonic(), e)))
    total_up = time.monotonic() - started
    gates_done = next(t for t, e in events if e.startswith("gate power")) - started
    started = time.monotonic()
    lanes.down(inventory)
    down = time.monotonic() - started

    lanes.up(inventory, "sglang", "512k")
    result = {}
    watcher = threading.Thread(target=lambda: result.update(
        report=watch_group(inventory, duration=30, interval=0.5)))
    watcher.start()
    time.sleep(2)
    with Fleet(inventory, inventory.select("spark-04")) as fleet:
        fleet.docker_client("spark-04").containers.get("sparkrack-sglang-r3").kill()
        killed = time.monotonic()
    detected = {}
    while watcher.is_alive() and "at" not in detected:
        time.sleep(0.05)
        if result.get("report") or not watcher.is_alive():
            detected["at"] = time.monotonic()
    watcher.join()
    lanes.down(inventory)

    bare_up, bare_down = bare_up_down(inventory, args.load_delay)
    overhead = total_up - args.load_delay
    print(f"up:   {total_up:5.1f} s total, load delay {args.load_delay:.1f} s -> overhead {overhead:4.1f} s "
          f"(gates incl. 1 s burn {gates_done:4.1f} s; start+readiness+smoke {overhead - gates_done:4.1f} s)")
    print(f"      bare docker SDK loop, no gates: overhead {bare_up:4.1f} s "
          f"(sparkrack start+readiness+smoke / bare = {(overhead - gates_done) / bare_up:4.2f}x)")
    print(f"down: {down:5.1f} s (ordered stop, remove, memory recovery); bare remove {bare_down:4.1f} s")
    print(f"dead rank: docker kill -> watch reported and stopped the group in "
          f"{detected['at'] - killed:4.1f} s (poll interval 0.5 s)")
    print("targets: overhead under 3 s, detection under 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
