#!/usr/bin/env python3
"""A wedged rank on the rehearsal rack: how soon the watchdog's progress check finds it,
against the engine's own watchdog in the same run, and what the check costs each poll.

- detection: rank 3 of a vLLM group hangs in a long prompt's forward (stub fault
  `wedge_above_tokens`), its process alive and /health green. Seconds from the prompt to
  `invoke watch`'s verdict with a stall budget of --budget s; the peer: the same wedge left
  to the engine's own watchdog (vLLM's execute-model timeout, 300 s; the stub keeps it),
  from the prompt to every rank exited. Target: found within the budget + 10 s.
- poll cost: one watchdog poll of a running group, median of --polls, without the progress
  check, with it (rank 0's /metrics), and the round trip to every node with and without the
  GPU reading (every poll takes it). Target: the check adds under 50 ms.
Needs root, `invoke rehearsal.up` and `invoke provision -i inventory/rehearsal`.

    python benchmarks/stall.py [--budget 30] [--polls 40] [--no-peer]
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from sparkrack.deployments.headapi import Endpoint  # noqa: E402
from sparkrack.deployments.ranks import engine_containers  # noqa: E402
from sparkrack.deployments.running import running  # noqa: E402
from sparkrack.engines import build_specs  # noqa: E402
from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.lifecycle import lanes  # noqa: E402
from sparkrack.rehearsal.stub.modeldir import write_stub_model  # noqa: E402
from sparkrack.safety import gateburn  # noqa: E402
from sparkrack.watchdog.watch import (  # noqa: E402
    GroupWatch,
    sample_nodes,
    watch_group,  # noqa: E402
)

REPO = Path(__file__).resolve().parent.parent
BASE = {"load_delay_s": 0.5, "tokens_per_s": 50}
WEDGE = {**BASE, "ranks": {"3": {"wedge_above_tokens": 400}}}


gateburn.SETTINGS = gateburn.BurnSettings(gate_seconds=1)  # the gates burn 1 s here


def with_budget(budget: int, folder: Path):
    """A copy of the rehearsal inventory with watchdog_stall_budget_s set."""
    shutil.copytree(REPO / "inventory" / "rehearsal", folder)
    vars_file = folder / "group_vars" / "all.yml"
    data = yaml.safe_load(vars_file.read_text()) or {}
    data["watchdog_stall_budget_s"] = budget
    vars_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(folder)


def long_prompt(inventory) -> None:
    """A 600-word prompt to rank 0, in a thread (the wedged group never answers it)."""
    def ask():
        try:
            Endpoint(inventory.head, 8000, "GLM-5.3").chat(
                [{"role": "user", "content": "word " * 600}], 8, timeout=600)
        except Exception:  # noqa: BLE001 - stopped under it
            pass
    threading.Thread(target=ask, daemon=True).start()


def median_ms(samples) -> float:
    return statistics.median(samples) * 1000


def poll_cost(inventory, polls: int) -> dict[str, float]:
    """Median ms of one poll without and with the progress check, and of the nodes' round
    trip without and with the GPU reading."""
    lanes.up(inventory, "vllm", "512k")
    head = build_specs(inventory, "vllm", "512k")[0]
    with Fleet(inventory) as fleet:
        ranks = running(fleet).alive
        groups = {label: GroupWatch(fleet, inventory, ranks, http_port=head.ports["http"],
                                    health_path=head.health_path, stall_budget_s=budget)
                  for label, budget in (("poll, no progress check", None),
                                        ("poll, progress check", 60))}
        trips = {"nodes round trip, memory": False, "nodes round trip, + GPUs": True}
        times: dict[str, list[float]] = {label: [] for label in (*groups, *trips)}
        for group in groups.values():
            group.poll()  # warm
        for _ in range(polls):  # interleaved: a busy moment hits both sides alike
            for label, group in groups.items():
                began = time.monotonic()
                assert group.poll().failure is None
                times[label].append(time.monotonic() - began)
            for label, gpu in trips.items():
                began = time.monotonic()
                sample_nodes(fleet, gpu=gpu)
                times[label].append(time.monotonic() - began)
        figures = {label: median_ms(values) for label, values in times.items()}
    lanes.down(inventory)
    return figures


def detection(inventory) -> tuple[float, str]:
    """Seconds from the long prompt to the watch's verdict, and the verdict."""
    lanes.up(inventory, "vllm", "512k")
    events, result = [], {}
    started = threading.Event()

    def on_event(line):
        events.append((time.monotonic(), line))
        started.set()
    watcher = threading.Thread(target=lambda: result.update(report=watch_group(
        inventory, duration=inventory.vars.watchdog_stall_budget_s + 120,
        on_event=on_event)))
    watcher.start()
    started.wait(60)
    sent = time.monotonic()
    long_prompt(inventory)
    watcher.join()
    found = next((t for t, line in events if line.startswith("group broken")), None)
    lanes.down(inventory)
    return (found - sent if found else float("nan")), result["report"].failure


def engine_watchdog(inventory) -> float:
    """Seconds from the long prompt to every rank exited, with nobody watching."""
    lanes.up(inventory, "vllm", "512k")
    sent = time.monotonic()
    long_prompt(inventory)
    with Fleet(inventory) as fleet:
        while True:
            ranks, _ = engine_containers(fleet)
            if ranks and not any(r.alive for r in ranks):
                break
            if time.monotonic() - sent > 900:
                raise SystemExit("the group did not end within 900 s")
            time.sleep(1)
    seconds = time.monotonic() - sent
    lanes.down(inventory)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=30, help="stall budget, seconds")
    parser.add_argument("--polls", type=int, default=40, help="polls per poll-cost figure")
    parser.add_argument("--no-peer", action="store_true",
                        help="skip the engine's own watchdog (it takes 300 s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        inventory = with_budget(args.budget, Path(folder) / "rack")
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, BASE)
        try:
            costs = poll_cost(inventory, args.polls)
            print(f"poll cost (median of {args.polls}):")
            for label, value in costs.items():
                print(f"  {label:28s} {value:7.1f} ms")
            print(f"  the progress check adds {costs['poll, progress check'] - costs['poll, no progress check']:.1f} ms "
                  f"per poll; the GPU reading {costs['nodes round trip, + GPUs'] - costs['nodes round trip, memory']:.1f} ms "
                  "while progress is in doubt")
            with Fleet(inventory) as fleet:
                write_stub_model(fleet, WEDGE)
            found, verdict = detection(inventory)
            print(f"wedge found by the watch in {found:.1f} s (stall budget {args.budget} s): "
                  f"{verdict}")
            if not args.no_peer:
                peer = engine_watchdog(inventory)
                print(f"the engine's own watchdog ended the group after {peer:.1f} s: "
                      f"the watch was {peer / found:.1f}x sooner")
        finally:
            lanes.down(inventory)
            with Fleet(inventory) as fleet:
                write_stub_model(fleet, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
