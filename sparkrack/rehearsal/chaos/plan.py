"""The chaos run's steps, drawn from a seed (pure: no rack, no clock).

Each step is one operator command (OPS) and, with probability FAULT_P, one fault (FAULTS)
injected at a random moment inside it, on a random node. The same (seed, count, nodes)
always gives the same steps, so a violation found at step K of seed S is replayed by
running S again up to K.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# operator commands: (name, relative weight)
OPS = (("up", 4), ("roll", 3), ("down", 3), ("provision", 2), ("reboot", 1),
       ("weights", 1), ("run", 1), ("bench", 1))
# faults: (name, relative weight). Node faults hit one node; the others hit the command.
FAULTS = (("cut", 3), ("poweroff", 2), ("latch", 2), ("hca_down", 1), ("renumber_gid", 1),
          ("kill_rank", 3), ("second_operator", 2), ("sigint", 3), ("head_lost", 1))
NODE_FAULTS = ("cut", "poweroff", "latch", "hca_down", "renumber_gid")
# head_lost: the head powered off for good; the run answers with `break-glass`, then
# replaces the head with the spare (`onboard --replace`) and recovers
FAULT_P = 0.6
# a fault lands 0-WINDOW_S[op] seconds after its command started: about the command's own
# length on the rehearsal rack, so that most faults land inside it
WINDOW_S = {"up": 8.0, "roll": 6.0, "down": 2.0, "provision": 1.5, "reboot": 20.0,
            "weights": 2.0, "run": 0.6, "bench": 3.0}
ENGINES = ("sglang", "vllm")


@dataclass(frozen=True)
class Fault:
    """A fault: its kind, the node it hits (node faults and kill_rank), when (s)."""

    kind: str
    node: str | None
    at_s: float

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"{self.kind}{where} at {self.at_s:.1f} s"


@dataclass(frozen=True)
class Step:
    """One step: the command (op and its engine, where it takes one) and its fault."""

    index: int
    op: str
    engine: str | None
    nodes: tuple[str, ...]  # reboot's nodes
    fault: Fault | None

    def describe(self) -> str:
        what = self.op + (f" {self.engine}" if self.engine else "") + \
            (f" {','.join(self.nodes)}" if self.nodes else "")
        return what + (f" + {self.fault.describe()}" if self.fault else "")


def _pick(rng: random.Random, weighted: Sequence[tuple[str, int]]) -> str:
    names, weights = zip(*weighted, strict=False)
    return rng.choices(names, weights=weights)[0]


def steps(seed: int, count: int, nodes: Sequence[str]) -> list[Step]:
    """count steps of the run seeded with seed, over the rack's nodes (rank order)."""
    rng = random.Random(seed)
    made = []
    for index in range(1, count + 1):
        op = _pick(rng, OPS)
        engine = rng.choice(ENGINES) if op in ("up", "roll") else None
        chosen = tuple(sorted(rng.sample(list(nodes[1:]), 2))) if op == "reboot" else ()
        fault = None
        if rng.random() < FAULT_P:
            kind = _pick(rng, FAULTS)
            node = rng.choice(list(nodes)) if kind in NODE_FAULTS or kind == "kill_rank" \
                else nodes[0] if kind == "head_lost" else None
            fault = Fault(kind, node, round(rng.uniform(0.0, WINDOW_S[op]), 1))
        made.append(Step(index, op, engine, chosen, fault))
    return made
