#!/usr/bin/env python3
"""CPU one SSH login costs a rehearsal node: the rack's PAM stack against the stock one.

sparkrack logs in to a node for every task and fleet (about a thousand logins in one rack
test module), and the suite is CPU-bound on two cores (docs/internals.md, "The test
suite"). A node's sshd logs in through files/pam-sshd: Debian's stack without pam_systemd
(a logind session and a systemd scope for each login) and pam_motd (run-parts on each).
Its peer, measured in the same run on the same node: this machine's own /etc/pam.d/sshd
(what a node's sshd read before), put on spark-01 for its rounds and taken off after.

Each login is the fleet's (paramiko, the inventory's known_hosts): connect, run `true`,
close. Its cost is spark-01's CPU (its cgroup: sshd, PID 1, logind, dbus, journald, the
command), median of the rounds. Needs root and `invoke rehearsal.up`. Prints figures; no
pass/fail.

    python benchmarks/node_login.py [--logins 40] [--rounds 3]
"""

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.rehearsal.rack import RehearsalRack  # noqa: E402

INVENTORY = REPO / "inventory" / "rehearsal"
NODE = "spark-01"
PAM = "/etc/pam.d/sshd"
REHEARSAL_STACK = REPO / "sparkrack" / "rehearsal" / "files" / "pam-sshd"
STOCK_STACK = Path(PAM)  # this machine's: a node is an overlay of it


def node_cpu_ms(cgroup: Path) -> float:
    stat = (cgroup / "cpu.stat").read_text()
    return int(re.search(r"usage_usec (\d+)", stat)[1]) / 1000


def login_cost(inventory, cgroup: Path, logins: int) -> tuple[float, float]:
    """(node CPU ms, wall ms) per login to NODE."""
    node = inventory.select(NODE)
    before, started = node_cpu_ms(cgroup), time.monotonic()
    for _ in range(logins):
        with Fleet(inventory, node) as fleet:
            result = fleet.run(["true"])[NODE]
        if not result.ok:
            raise SystemExit(f"{NODE}: {result.error or result.stderr.strip()}")
    wall = time.monotonic() - started
    return (node_cpu_ms(cgroup) - before) / logins, wall * 1000 / logins


def put_stack(inventory, stack: Path) -> None:
    with Fleet(inventory, inventory.select(NODE)) as fleet:
        fleet.put({NODE: [(stack.read_bytes(), PAM, 0o644)]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    inventory = load_inventory(INVENTORY)
    rack = RehearsalRack(inventory, say=lambda msg: None)
    cgroup = next(c for c in rack.node(NODE).cgroups() if (c / "cpu.stat").exists())
    costs: dict[str, list[tuple[float, float]]] = {"rehearsal": [], "stock": []}
    try:
        for _ in range(args.rounds):  # interleaved: a busy spell hits both alike
            for label, stack in (("stock", STOCK_STACK), ("rehearsal", REHEARSAL_STACK)):
                put_stack(inventory, stack)
                costs[label].append(login_cost(inventory, cgroup, args.logins))
    finally:
        put_stack(inventory, REHEARSAL_STACK)
    medians = {label: (statistics.median(c for c, _ in runs),
                       statistics.median(w for _, w in runs)) for label, runs in costs.items()}
    for label, (cpu, wall) in medians.items():
        print(f"{label:<9} PAM stack: {cpu:5.1f} ms of {NODE}'s CPU a login, {wall:4.0f} ms "
              f"wall (median of {args.rounds} x {args.logins})")
    print(f"ratio: {medians['rehearsal'][0] / medians['stock'][0]:.2f}")


if __name__ == "__main__":
    main()
