#!/usr/bin/env python3
"""What the rack lock and the audit record add to a no-change `provision` (issue 11).

In one run, alternating round by round so both see the same rack and the same warm caches:
- bare:   provision(inventory) as the task body runs it, no lock;
- locked: the same inside oplock.Guard: local file lock, SSH connection to the head, take
          the lock and append the start record (one round trip) while the task's
          connections open in the background (fleet_warm), provision, append the end
          record and release (one round trip), local audit copy.
Prints the medians, their difference (the lock's cost; target: under 50 ms), and the
lock's parts measured alone: the head connection, one bare `true` on it (the floor of any
SSH command there: the node's shell start-up, e.g. a login-time .bashrc, is in it), take
and release. Needs `invoke rehearsal.up` (or -i INVENTORY of a provisioned rack). The
lock and audit records go to the head's /var/lib/sparkrack as a real task's would (task
"bench-provision").

    python benchmarks/lock.py [-i inventory/rehearsal] [--rounds 11]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.oplock import audit  # noqa: E402
from sparkrack.oplock.guard import Guard  # noqa: E402
from sparkrack.oplock.lock import call  # noqa: E402
from sparkrack.provision import provision  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def must_converge(report) -> None:
    if report.exit_code or report.changed:
        raise SystemExit(f"provision is not a no-change run here (exit {report.exit_code}, "
                         f"{report.changed} changed): run `invoke provision` first")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "rehearsal"))
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    rack = load_inventory(args.inventory)
    must_converge(provision(rack))  # warm-up, and the proof that nothing is left to change

    bare, locked, parts = [], [], {"connect": [], "take": [], "release": []}
    for _ in range(args.rounds):
        started = time.perf_counter()
        must_converge(provision(rack))
        bare.append(time.perf_counter() - started)

        started = time.perf_counter()
        guard = Guard(rack, "bench-provision", {"inventory": args.inventory})
        guard.begin()
        with audit.active(guard.record):
            report = provision(rack)
        guard.end("ok")
        locked.append(time.perf_counter() - started)
        must_converge(report)

        # the lock's parts alone (a guard that is not timed above)
        part = Guard(rack, "bench-lock", {})
        started = time.perf_counter()
        part.lock._fleet.run({rack.head.name: ["true"]})
        parts["connect"].append(time.perf_counter() - started)
        started = time.perf_counter()
        part.lock.acquire(None, part.record.start_line())  # the lock alone: no prewarm
        parts["take"].append(time.perf_counter() - started)
        started = time.perf_counter()
        part.lock.release([part.record.end_line("ok")])
        parts["release"].append(time.perf_counter() - started)

    with Fleet(rack, [rack.head]) as fleet:
        fleet.run(["true"])
        floor = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            fleet.run(["true"])
            floor.append(time.perf_counter() - started)
        show = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            call(fleet, rack.head.name, "show")
            show.append(time.perf_counter() - started)

    median = statistics.median
    cost = median(locked) - median(bare)
    print(f"no-change provision on {len(rack.nodes)} nodes, median of {args.rounds} rounds")
    print(f"  without the lock      {ms(median(bare))}")
    print(f"  with lock and audit   {ms(median(locked))}")
    print(f"  the lock adds         {ms(cost)}   (target: under 50 ms)"
          f"  {'OK' if cost < 0.05 else 'OVER'}")
    print("the lock's parts, alone")
    print(f"  SSH connection to {rack.head.name} and one `true`  {ms(median(parts['connect']))}")
    print(f"  take + start record (one round trip)    {ms(median(parts['take']))}")
    print(f"  end record + release (one round trip)   {ms(median(parts['release']))}")
    print(f"  `true` on a warm connection (the floor)  {ms(median(floor))}")
    print(f"  `invoke lock`'s read (one round trip)   {ms(median(show))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
