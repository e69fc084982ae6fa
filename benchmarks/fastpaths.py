#!/usr/bin/env python3
"""Fast paths (issue 17): what the operator waits for before a task does anything.

Each figure is the median wall time of N fresh subprocesses, run from the repo root with
this Python, printed beside its floor and the ratio figure/floor. The floor of the CLI
figures is `python -c "import invoke"`: invoke itself, nothing of sparkrack. Target: each
ratio <= 2x. Runs are interleaved (one of each figure per round) so drift on the machine
hits every figure alike; a warm-up round fills the bytecode caches first.

    python benchmarks/fastpaths.py [--runs 21]

Contacts no node unless --rack: then also `status` with one node's cable pulled against
`status` with every node up (the dead node must be named within 3 s: a fast TCP probe
before the SSH handshake), and a no-change `invoke provision` of every role on every node,
end to end with the rack lock and the audit records (target: within 0.7 s), beside
`status` (the same connections, read-only, no lock); and `invoke up`'s overhead: its wall
time minus the stub engine's own load, with its phases as `up --json` reports them. The
burn gate is the floor of that overhead (the real load's ~4.4 s start-up, which the
rehearsal's `gpu-sim load` reproduces, then 1.5 s under load); the target is for the rest:
under 3 s.
"""

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0


@dataclass(frozen=True)
class Figure:
    """One timed command; `floor` names the figure it is compared with (None: it is a floor)."""

    name: str
    argv: tuple[str, ...]
    floor: str | None = None
    exit_code: int = 0  # what the command must exit with
    cut: str | None = None  # a rehearsal node whose cable is out while it runs
    within_s: float | None = None  # an absolute target instead of the ratio to the floor


PY = sys.executable
CLI_FIGURES = (
    Figure("import invoke", (PY, "-c", "import invoke")),
    Figure("invoke --list", (PY, "-m", "invoke", "--list"), floor="import invoke"),
    Figure("invoke -h up", (PY, "-m", "invoke", "-h", "up"), floor="import invoke"),
    Figure("invoke -h provision", (PY, "-m", "invoke", "-h", "provision"),
           floor="import invoke"),
)
# With --rack (needs `invoke rehearsal.up` and `invoke provision`): `status` with a node's
# cable out against `status` with every node up (target: the dead node named within 3 s);
# a no-change provision (target: within 0.7 s).
REHEARSAL = ("-i", "inventory/rehearsal")
RACK_FIGURES: tuple[Figure, ...] = (
    Figure("invoke status", (PY, "-m", "invoke", "status", *REHEARSAL)),
    Figure("status, spark-05 cut", (PY, "-m", "invoke", "status", *REHEARSAL),
           floor="invoke status", exit_code=1, cut="spark-05", within_s=3.0),
    Figure("provision, no change", (PY, "-m", "invoke", "provision", *REHEARSAL),
           floor="invoke status", within_s=0.7),
)


def run_once(figure: Figure) -> float:
    """Wall seconds of one fresh run; an unexpected exit code stops the benchmark."""
    rack = None
    if figure.cut:
        sys.path.insert(0, str(REPO))
        from sparkrack.inventory import load_inventory
        from sparkrack.rehearsal.rack import RehearsalRack

        rack = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal"), say=lambda m: None)
        rack.cut(figure.cut)
    try:
        started = time.perf_counter()
        done = subprocess.run(figure.argv, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - started
    finally:
        if rack is not None:
            rack.heal(figure.cut)
    if done.returncode != figure.exit_code:
        raise SystemExit(f"{figure.name}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds


def measure(figures: tuple[Figure, ...], runs: int) -> dict[str, float]:
    """Median seconds per figure over `runs` interleaved rounds (after one warm-up round)."""
    for figure in figures:
        run_once(figure)
    samples: dict[str, list[float]] = {f.name: [] for f in figures}
    for _ in range(runs):
        for figure in figures:
            samples[figure.name].append(run_once(figure))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(figures: tuple[Figure, ...], medians: dict[str, float], runs: int) -> int:
    """Print each figure beside its floor and the ratio; the number of figures over target."""
    print(f"median of {runs} runs, {PY} in {REPO}; target: ratio <= {TARGET_RATIO:g}x")
    print(f"{'figure':<24} {'median':>8} {'floor':>8} {'ratio':>6}  verdict")
    over = 0
    for figure in figures:
        seconds = medians[figure.name]
        if figure.floor is None:
            print(f"{figure.name:<24} {seconds:>7.3f}s {'-':>8} {'-':>6}  (floor)")
            continue
        floor = medians[figure.floor]
        ratio = seconds / floor
        ok = seconds <= figure.within_s if figure.within_s else ratio <= TARGET_RATIO
        over += not ok
        target = f" (target: within {figure.within_s:g} s)" if figure.within_s else ""
        print(f"{figure.name:<24} {seconds:>7.3f}s {floor:>7.3f}s {ratio:>5.2f}x  "
              f"{'ok' if ok else 'OVER'}{target}")
    return over


def up_overhead(runs: int) -> int:
    """`invoke up --engine sglang --json` on the rehearsal rack, `runs` times (each followed
    by an untimed `invoke down`): the wall time, the phases the record reports, and the
    overhead (wall minus the stub engine's own load, its load_delay_s) with and without the
    burn gate. Prints the medians; returns 1 if the overhead beyond the burn is over 3 s."""
    import json

    sys.path.insert(0, str(REPO))
    from sparkrack.fleet import Fleet
    from sparkrack.inventory import load_inventory
    from sparkrack.rehearsal.stub.config import DEFAULTS

    rack = load_inventory(REPO / "inventory" / "rehearsal")
    with Fleet(rack, [rack.head]) as fleet:
        found = fleet.run(["cat", f"{rack.vars.model_path}/sparkrack-stub.json"])[rack.head.name]
    stub = json.loads(found.stdout) if found.status == "ok" else {}
    load = float(stub.get("load_delay_s", DEFAULTS["load_delay_s"]))
    down = (PY, "-m", "invoke", "down", *REHEARSAL)
    subprocess.run(down, cwd=REPO, capture_output=True)
    walls, phases = [], []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run((PY, "-m", "invoke", "up", "--engine", "sglang", "--json",
                               *REHEARSAL), cwd=REPO, capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        subprocess.run(down, cwd=REPO, capture_output=True)
        if done.returncode:
            raise SystemExit(f"invoke up: exit {done.returncode}: {done.stderr.strip()[-500:]}")
        phases.append(json.loads(done.stdout)["phases"])
    median = statistics.median
    wall = median(walls)
    burn = median(p["burn"] for p in phases)
    beyond = wall - load - burn
    print(f"\n`invoke up --engine sglang`, median of {runs} (the stub's own load: {load:g} s)")
    for name in phases[0]:
        print(f"  phase {name:<10} {median(p.get(name, 0.0) for p in phases):6.2f} s")
    print(f"  wall                {wall:6.2f} s")
    print(f"  overhead            {wall - load:6.2f} s  (wall minus the engine's own load)")
    print(f"  of which the burn   {burn:6.2f} s  (the floor: the load's start-up and "
          "1.5 s under load, sampled every 0.5 s)")
    print(f"  overhead beyond it  {beyond:6.2f} s  {'ok' if beyond < 3 else 'OVER'} "
          "(target: under 3 s)")
    return int(beyond >= 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per figure")
    parser.add_argument("--rack", action="store_true",
                        help="also the rehearsal-rack figures (root, the rack up)")
    args = parser.parse_args()
    figures = CLI_FIGURES + (RACK_FIGURES if args.rack else ())
    report(figures, measure(figures, args.runs), args.runs)
    if args.rack:
        up_overhead(max(3, args.runs // 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
