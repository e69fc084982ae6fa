#!/usr/bin/env python3
"""CPU one rehearsal-rack command costs the machine: what bounds the test suite's speed.

The suite runs two racks on two cores and is CPU-bound (docs/internals.md, "The test
suite"), so its wall time follows the CPU each command costs, on the nodes and here.

1. The simulated nvidia-smi, which the burn check's sampler runs every half second on
   every node: CPU per call inside spark-01, beside its peer measured in the same run,
   `python3 -I -S -c pass` (the floor of any Python command there).
2. `invoke status`, `up --engine sglang` and `down` with the suite's burn load start-up
   (0.1 s): machine CPU-seconds (all of /proc/stat: meaningful on a quiet machine),
   processes started, and the cores used while it ran.

Needs root and `invoke rehearsal.up && invoke provision` with no engine running; puts the
nodes' load start-up back when done. Prints figures; no pass/fail.

    python benchmarks/rackcpu.py [--calls 100] [--rounds 3]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.rehearsal.rack import RehearsalRack  # noqa: E402

INVENTORY = REPO / "inventory" / "rehearsal"
SAMPLE = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,utilization.gpu",
          "--format=csv,noheader,nounits"]
FLOOR = ["python3", "-I", "-S", "-c", "pass"]
# runs argv N times on the node; prints the children's CPU-seconds
LOOP = ("import resource, subprocess, sys\n"
        "n, argv = int(sys.argv[1]), sys.argv[2:]\n"
        "for _ in range(n):\n"
        "    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)\n"
        "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(used.ru_utime + used.ru_stime)\n")
SUITE_LOAD_STARTUP_S = 0.1  # as tests/rackhealth.py sets it


def node_cpu_ms(fleet: Fleet, argv: list[str], calls: int) -> float:
    """CPU milliseconds per run of argv on spark-01."""
    result = fleet.run({"spark-01": ["python3", "-I", "-S", "-c", LOOP, str(calls), *argv]},
                       timeout=120)["spark-01"]
    if not result.ok:
        raise SystemExit(f"spark-01: {result.error or result.stderr.strip()}")
    return float(result.stdout.strip()) * 1000 / calls


def machine() -> tuple[int, int]:
    """(busy jiffies, processes started) of the whole machine so far."""
    with open("/proc/stat", encoding="ascii") as fh:
        lines = fh.read().splitlines()
    fields = [int(x) for x in lines[0].split()[1:]]
    processes = next(int(line.split()[1]) for line in lines if line.startswith("processes "))
    return sum(fields[:3]) + fields[5] + fields[6], processes


def command_cost(words: list[str]) -> tuple[float, float, int]:
    """(wall s, machine CPU-s, processes) of one `invoke WORDS` on the rehearsal rack."""
    env = {**os.environ, "SPARKRACK_INVENTORY": str(INVENTORY)}
    busy0, procs0 = machine()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "invoke", *words], cwd=REPO, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    busy1, procs1 = machine()
    if done.returncode:
        raise SystemExit(f"invoke {' '.join(words)} failed:\n{done.stdout}{done.stderr}")
    return wall, (busy1 - busy0) / os.sysconf("SC_CLK_TCK"), procs1 - procs0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    inventory = load_inventory(INVENTORY)
    with Fleet(inventory) as fleet:
        smi = statistics.median(node_cpu_ms(fleet, SAMPLE, args.calls) for _ in range(3))
        floor = statistics.median(node_cpu_ms(fleet, FLOOR, args.calls) for _ in range(3))
    print(f"simulated nvidia-smi sample: {smi:5.1f} ms CPU a call; python3 -I -S -c pass "
          f"{floor:5.1f} ms ({smi / floor:.2f}x the floor), median of 3 x {args.calls}")

    rack = RehearsalRack(inventory, say=lambda msg: None)
    for node in rack.nodes:
        rack.load_startup(node.name, SUITE_LOAD_STARTUP_S)
    try:
        costs: dict[str, list[tuple[float, float, int]]] = {}
        for _ in range(args.rounds):
            for words in (["status"], ["up", "--engine", "sglang"], ["down"]):
                costs.setdefault(" ".join(words), []).append(command_cost(words))
    finally:
        for node in rack.nodes:
            rack.load_startup(node.name, None)
    for label, runs in costs.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        procs = statistics.median(r[2] for r in runs)
        print(f"invoke {label:<18} {wall:5.2f} s wall  {cpu:5.2f} CPU-s  ({cpu / wall:4.2f} "
              f"cores)  {procs:6.0f} processes  (median of {len(runs)})")


if __name__ == "__main__":
    main()
