#!/usr/bin/env python3
"""What reading every node's env files back costs the `up` gates, on the rehearsal rack.

`up` learns each node's facts and its env files in ONE SSH round trip per node (one node
script answers both kinds of query: sparkrack/facts), then judges the files against what provision would write (pure,
here). Figures, medians of --runs, all 8 nodes on warm connections:

- facts only: the round trip the gates made before the env files were read (the floor);
- facts + env files in one process: what the gates do now;
- facts, then env files: the same in two round trips (the peer);
- judging the env files of 8 nodes here (render the roles, compare).

Needs root, `invoke rehearsal.up` and `invoke provision -i inventory/rehearsal`.

    python benchmarks/engine_env.py [--runs 15]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkrack.facts import node as node_facts  # noqa: E402
from sparkrack.facts.node import facts_argv  # noqa: E402
from sparkrack.facts.provision import facts_of  # noqa: E402
from sparkrack.facts.queries import answer, argv  # noqa: E402
from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.provision.envfiles import EnvFiles  # noqa: E402


def median_seconds(work, runs: int) -> float:
    """The median wall time of work() over runs."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    inventory = load_inventory(Path(__file__).resolve().parent.parent / "inventory" / "rehearsal")
    files = EnvFiles(inventory, "sglang")
    with Fleet(inventory) as fleet:
        fleet.run(["true"]).raise_for_failures()  # warm every connection
        asked = {n.name: node_facts.queries() + files.queries(n) for n in fleet.nodes}
        gather = {n.name: argv(files.queries(n)) for n in fleet.nodes}
        together = {name: argv(queries) for name, queries in asked.items()}
        outputs = {}

        def both():
            results = fleet.run(together, timeout=20)
            results.raise_for_failures()
            for result in results:
                outputs[result.node] = facts_of(answer(result.stdout, asked[result.node]))

        floor = median_seconds(lambda: fleet.run(facts_argv(), timeout=20).raise_for_failures(),
                               args.runs)
        one_trip = median_seconds(both, args.runs)
        two_trips = median_seconds(lambda: (fleet.run(facts_argv(), timeout=20).raise_for_failures(),
                                            fleet.run(gather, timeout=20).raise_for_failures()),
                                   args.runs)
        judge = median_seconds(lambda: [files.read(node, outputs[node.name])
                                        for node in fleet.nodes], args.runs)
    problems = [p for node in fleet.nodes for p in files.read(node, outputs[node.name]).problems]
    print(f"8 nodes, median of {args.runs} runs, warm connections")
    print(f"facts only (floor)                 {floor * 1000:7.1f} ms")
    print(f"facts + env files, one round trip  {one_trip * 1000:7.1f} ms  "
          f"{one_trip / floor:.2f}x the floor")
    print(f"facts, then env files (two trips)  {two_trips * 1000:7.1f} ms  "
          f"{two_trips / floor:.2f}x the floor; one trip saves "
          f"{(two_trips - one_trip) * 1000:.0f} ms")
    print(f"judging 8 nodes' env files here    {judge * 1000:7.1f} ms")
    print(f"env problems found: {len(problems)}" + (f" ({problems[0]})" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
