#!/usr/bin/env python3
"""Faults at random: a seeded chaos run on the rehearsal rack, invariants after every step.

Each step runs one operator command as a real `invoke` process (up, roll, down, provision,
reboot of two nodes, weights.stage of a small model, run, bench) and, often, injects one
fault at a random moment inside it (cut, power-off, latch, HCA down, renumbered GID, a
rank's process killed, a second operator's `down`, Ctrl-C, the head lost for good). Then
the faults are healed, the rack's real state is judged (sparkrack/rehearsal/chaos/invariants.py),
and after a fault that hit a node or a rank, recovery (`down`, `up`) is timed and judged
again. A lost head is answered as an operator would: `break-glass`, then `onboard
--replace` with the spare (spark-09, added for the run), then `watch.install` again. The
watchdog service runs on spark-08 the whole run. The same seed gives the same steps: a
violation at step K of seed S is replayed with `--seed S --until K`.

Needs root and the rehearsal rack up and provisioned (`invoke rehearsal.up`, `invoke
provision`). Works on a private copy of inventory/rehearsal; leaves the rack healthy,
nothing running, spark-01 the head, the watchdog and the spare removed if the run added
them.

    python benchmarks/chaos.py --seed 1 --steps 40 [--until K] [--json FILE] [--plan] [--verbose]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.rehearsal.chaos.plan import steps  # noqa: E402
from sparkrack.rehearsal.chaos.runner import Runner  # noqa: E402
from sparkrack.rehearsal.chaos.summary import Report, outcome  # noqa: E402
from sparkrack.rehearsal.privatecopy import copy_inventory  # noqa: E402
from sparkrack.rehearsal.rack import RehearsalRack  # noqa: E402
from sparkrack.rehearsal.repair import repair_faults  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--until", type=int, help="stop after step K (replay up to it)")
    parser.add_argument("--json", help="write the report here as JSON")
    parser.add_argument("--plan", action="store_true", help="print the steps; run nothing")
    parser.add_argument("--verbose", action="store_true", help="every command's last lines")
    args = parser.parse_args()
    os.environ["SPARKRACK_SANDBOX"] = "1"  # the rehearsal rack only
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    plan = steps(args.seed, args.steps, [n.name for n in inventory.nodes])
    if args.until:
        plan = plan[:args.until]
    if args.plan:
        for step in plan:
            print(f"{step.index:3d} {step.describe()}")
        return 0
    state = Path(tempfile.mkdtemp(prefix=f"sparkrack-chaos-{args.seed}-"))
    private = copy_inventory(inventory.path, state / "inventory")  # a head swap rewrites it
    env = {**os.environ, "SPARKRACK_INVENTORY": str(private), "NO_COLOR": "1",
           "SPARKRACK_STATE_DIR": str(state)}
    rack = RehearsalRack(inventory, say=lambda msg: None)
    runner = Runner(rack, load_inventory(private),
                    [sys.executable, "-m", "invoke", "-r", str(REPO)], env)
    repair_faults(rack)
    runner.prepare()
    report = Report(args.seed)
    started = time.monotonic()
    for step in plan:
        result = runner.run_step(step)
        report.results.append(result)
        print(f"{step.index:3d} {step.describe():<48} {outcome(result.exit_code):<15} "
              f"{result.seconds:5.1f} s  {result.injected or ''}"
              + (f"  head swap {result.head_swap_s:.1f} s" if result.head_swap_s else "")
              + (f"  recovery {result.recovery_s:.1f} s" if result.recovery_s else ""),
              flush=True)
        for violation in result.violations:
            print(f"    VIOLATION {violation}", flush=True)
        if result.violations or args.verbose:
            print("    | " + result.tail.strip().replace("\n", "\n    | "), flush=True)
    report.seconds = time.monotonic() - started
    report.ending = runner.finish()
    print("\n".join(report.lines()))
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=1) + "\n")
    return 1 if report.violations() else 0


if __name__ == "__main__":
    sys.exit(main())
