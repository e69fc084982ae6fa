#!/usr/bin/env python3
"""Wall time of `restart-rack` on the rehearsal rack by batch size (1, 2, 4), as a table.

Each run stops any engine, reboots all eight nodes in batches and verifies every batch
(back with a new boot id, cap unit active this boot, a 1 s burn) before the next. Needs
root, `invoke rehearsal.up` and `invoke provision -i inventory/rehearsal`.

    python benchmarks/restart.py [--sizes 1,2,4]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.lifecycle.restart import restart_rack  # noqa: E402
from sparkrack.safety import gateburn  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4")
    args = parser.parse_args()
    inventory = load_inventory(Path(__file__).resolve().parent.parent / "inventory" / "rehearsal")
    gateburn.SETTINGS = gateburn.BurnSettings(gate_seconds=1)  # the gates burn 1 s here
    print(f"{'batch size':>10}  {'batches':>7}  {'wall s':>7}  {'s per batch':>11}  {'max down at once':>16}")
    for size in (int(s) for s in args.sizes.split(",")):
        started = time.monotonic()
        report = restart_rack(inventory, batch_size=size)
        wall = time.monotonic() - started
        windows = [(r.requested, r.back) for batch in report.batches for r in batch]
        most = max(sum(a <= t < b for a, b in windows) for t, _ in windows)
        print(f"{size:>10}  {len(report.batches):>7}  {wall:>7.1f}  {wall / len(report.batches):>11.1f}"
              f"  {most:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
