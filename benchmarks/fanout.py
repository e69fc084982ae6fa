#!/usr/bin/env python3
"""Fan-out cost: one command on every node, cold (new connections) and warm (reused).

Runs on the rehearsal rack (8 nspawn nodes with systemd) and on 32 light nodes
(namespace + sshd) to show how the cost grows with the node count. The peer measured in
the same run is the OpenSSH client in a plain loop over the same nodes (one `ssh` process
per node, in parallel). Needs root and `invoke rehearsal.up`. Prints figures; no pass/fail.

    python benchmarks/fanout.py [--rounds 5]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightnodes import LightNodes  # noqa: E402

from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402

COMMAND = ["cat", "/etc/hostname"]


def timed(fn) -> float:
    """Seconds one call of fn takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def fleet_figures(inventory, rounds: int) -> tuple[float, float]:
    """(median cold seconds, median warm seconds) of one command on all nodes."""
    def must_all_ok(fleet):
        result = fleet.run(COMMAND)
        if not result.all_ok:
            raise SystemExit(f"fan-out failed: {result.summary()}")

    cold, warm = [], []
    for _ in range(rounds):
        with Fleet(inventory) as fleet:
            cold.append(timed(lambda: must_all_ok(fleet)))
            warm += [timed(lambda: must_all_ok(fleet)) for _ in range(3)]
    return statistics.median(cold), statistics.median(warm)


def openssh_figure(inventory, rounds: int) -> float:
    """Median seconds of `ssh node cat /etc/hostname` for all nodes in parallel (new processes)."""
    def one(node):
        subprocess.run(["ssh", "-i", str(node.key_file), "-o", "BatchMode=yes",
                        "-o", f"UserKnownHostsFile={inventory.known_hosts_path}",
                        "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                        f"{node.user}@{node.address}", *COMMAND],
                       check=True, capture_output=True)

    def all_nodes():
        with ThreadPoolExecutor(max_workers=len(inventory.nodes)) as pool:
            list(pool.map(one, inventory.nodes))

    return statistics.median(timed(all_nodes) for _ in range(rounds))


def report(label: str, inventory, rounds: int) -> None:
    """Print one line of figures for a set of nodes."""
    n = len(inventory.nodes)
    cold, warm = fleet_figures(inventory, rounds)
    peer = openssh_figure(inventory, rounds)
    print(f"{label:<26} {n:>3} nodes  cold {cold * 1000:7.0f} ms  warm {warm * 1000:6.0f} ms  "
          f"openssh loop {peer * 1000:7.0f} ms  (cold/openssh {cold / peer:4.2f}x, "
          f"warm/openssh {warm / peer:4.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--light", type=int, default=32, help="number of light nodes")
    args = parser.parse_args()
    if os.geteuid() != 0 or not REHEARSAL_STATE_FILE.exists():
        print("needs root and a running rehearsal rack: invoke rehearsal.up", file=sys.stderr)
        return 2
    repo = Path(__file__).resolve().parent.parent
    report("rehearsal rack (systemd)", load_inventory(repo / "inventory" / "rehearsal"), args.rounds)
    with LightNodes(args.light) as light_inventory:
        report("light nodes (sshd only)", load_inventory(light_inventory), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
