#!/usr/bin/env python3
"""Time to serving on the rehearsal rack, cold (no compile caches on the nodes) against
warm (a restart of the same lane: every node's folder holds what the last start compiled).

Each round: the lane's cache folders removed from every node, `up` (cold: every rank
compiles after its load), `down`, `up` again (warm: every rank reads its node's caches),
`down`. Time to serving is `up`'s wall time (gates, burn, start, ready, smoke); `ready`
(first start to rank 0 healthy) is where the compile falls. The stub's settings are the
rehearsal's defaults unless given: a 3 s load and, cold, a compile as long as the load
(sparkrack/rehearsal/stub/compilecache.py). Needs root, `invoke rehearsal.up` and
`invoke provision -i inventory/rehearsal`.

    python benchmarks/warm.py [--engine sglang] [--runs 3] [--load 3] [--compile S]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.lifecycle import lanes  # noqa: E402
from sparkrack.lifecycle.cachefolders import list_folders, remove_folders  # noqa: E402
from sparkrack.rehearsal.stub.modeldir import write_stub_model  # noqa: E402
from sparkrack.safety import gateburn  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


gateburn.SETTINGS = gateburn.BurnSettings(gate_seconds=1)  # the gates burn 1 s here


def forget(inventory, engine: str) -> int:
    """Remove engine's compile cache folders from every node (a lab's reset, not the
    housekeeping of `caches.remove`, which keeps the last good lane's); bytes removed."""
    with Fleet(inventory) as fleet:
        folders, errors = list_folders(fleet, inventory.nodes)
        if errors:
            raise SystemExit(f"cannot list the caches: {errors}")
        doomed = [f for f in folders if f.engine == engine]
        removed = remove_folders(fleet, doomed, check=False)
    return sum(v.get("bytes", 0) for found in removed.values() for v in found.values())


def start(inventory, engine: str, profile: str) -> tuple[float, float, list[str]]:
    """(up's wall seconds, its ready phase, what it said of the caches); then down."""
    said: list[str] = []
    began = time.monotonic()
    deployment = lanes.up(inventory, engine, profile,
                          on_event=lambda line: said.append(line))
    wall = time.monotonic() - began
    lanes.down(inventory)
    return wall, deployment.phases["ready"], [s for s in said if s.startswith("compile caches")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="sglang")
    parser.add_argument("--profile", default="512k")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--load", type=float, default=3.0, help="the stub's load_delay_s")
    parser.add_argument("--compile", type=float, default=None,
                        help="the stub's compile_s (default: as long as the load)")
    args = parser.parse_args()
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    stub = {"load_delay_s": args.load, "tokens_per_s": 50, "compile_s": args.compile}
    lanes.down(inventory)
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, stub)
    compile_s = args.load if args.compile is None else args.compile
    print(f"{args.engine} {args.profile}, stub load {args.load:g} s, cold compile "
          f"{compile_s:g} s (warm: read in 1/20 of it), {args.runs} rounds")
    cold, warm = [], []
    for round_ in range(1, args.runs + 1):
        freed = forget(inventory, args.engine)
        cold.append(start(inventory, args.engine, args.profile))
        warm.append(start(inventory, args.engine, args.profile))
        print(f"round {round_}: removed {freed / 2**20:.1f} MiB of caches; cold up "
              f"{cold[-1][0]:.2f} s (ready {cold[-1][1]:.2f} s), warm up {warm[-1][0]:.2f} s "
              f"(ready {warm[-1][1]:.2f} s)")
        for line in cold[-1][2] + warm[-1][2]:
            print(f"  {line}")
    cold_up, warm_up = (statistics.median(r[0] for r in rows) for rows in (cold, warm))
    cold_ready, warm_ready = (statistics.median(r[1] for r in rows) for rows in (cold, warm))
    print(f"{'':>22}  {'cold':>7}  {'warm':>7}  {'saved':>7}  {'cold/warm':>9}")
    for name, c, w in (("time to serving (up)", cold_up, warm_up),
                       ("ready phase", cold_ready, warm_ready)):
        print(f"{name:>22}  {c:>7.2f}  {w:>7.2f}  {c - w:>7.2f}  {c / w:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
