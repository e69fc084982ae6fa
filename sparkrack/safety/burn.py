"""The burn check: load every GPU for a few seconds, sample its SM clock and power, judge
(remote/capjudge.py), and record the verdict on each node as BURN_RECORD
(docs/provisioning.md#the-burn-proving-the-cap).

    results = burn(inventory, nodes, seconds=5)   # the safety gates call this
    [r.node for r in results if not r.ok]
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from sparkrack.facts.node import BURN_RECORD
from sparkrack.fleet import Fleet, sh
from sparkrack.inventory import Inventory, Node
from sparkrack.remote import text
from sparkrack.remote.capjudge import (
    BAD_CAP,
    BUSY_PERCENT,
    BUSY_SAMPLES,
    LATCHED,
    LOAD_RUNS,
    OK,
    SAMPLE_FIELDS,
    SAMPLE_SECONDS,
    UNCAPPED,
    UNREACHABLE,
    Sample,
    judge,
    max_clock,
    parse_output,
)


@dataclass
class BurnResult:
    """One node's burn: the verdict and the numbers behind it."""

    node: str
    ok: bool
    verdict: str
    reason: str
    cap_mhz: int
    max_sm_mhz: int | None = None
    max_power_w: float | None = None
    boot_id: str = ""
    time: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    recorded: bool = False
    error: str | None = None

    @property
    def summary(self) -> str:
        """The verdict in a few words (the record's reason, shown by `invoke status`)."""
        if self.verdict == OK:
            return f"{self.max_sm_mhz} MHz <= cap {self.cap_mhz}"
        if self.verdict == UNCAPPED:
            return f"UNCAPPED {self.max_sm_mhz} MHz > cap {self.cap_mhz}"
        if self.verdict == LATCHED:
            return f"LATCHED {self.max_sm_mhz} MHz: needs a full power removal"
        if self.verdict == BAD_CAP:
            return f"BAD CAP {self.cap_mhz} MHz: no burn can prove it"
        return self.verdict

    def record(self) -> dict:
        """The BURN_RECORD JSON written on the node (what `invoke status` reads)."""
        return {"ok": self.ok, "verdict": self.verdict, "reason": self.summary,
                "boot_id": self.boot_id, "time": self.time, "max_sm_mhz": self.max_sm_mhz,
                "max_power_w": self.max_power_w, "cap_mhz": self.cap_mhz,
                "samples": len(self.samples)}

    def as_dict(self) -> dict:
        data = asdict(self)
        data["samples"] = [asdict(s) for s in self.samples]
        return data


def load_argv(node: Node, seconds: float, image: str) -> list[str]:
    """The node's load command with {seconds} and {image} filled in (argv, never a string)."""
    template = node.vars.rehearsal_burn_command if node.vars.rehearsal else node.vars.burn_command
    text = f"{seconds:g}"
    return [word.replace("{seconds}", text).replace("{image}", image) for word in template]


def burn_argv(node: Node, seconds: float, image: str) -> list[str]:
    """The whole burn command for node: load plus sampling (inventory values as args)."""
    return sh(text("burn"), str(SAMPLE_SECONDS), BURN_RECORD, SAMPLE_FIELDS, str(BUSY_SAMPLES),
              str(LOAD_RUNS), str(BUSY_PERCENT), *load_argv(node, seconds, image))


def burn(inventory: Inventory, nodes: Iterable[Node] | str | None = None,
         seconds: float = 5.0, *, record: bool = True,
         fleet: Fleet | None = None) -> list[BurnResult]:
    """Burn-check the nodes (default: all; a --limit string works) in parallel, by rank.

    Writes each reachable node's BURN_RECORD unless record is False. Never raises for a
    node: an unreachable or failing node is a result with ok False.
    """
    selected = (inventory.select(nodes) if nodes is None or isinstance(nodes, str)
                else tuple(nodes))
    image = next(iter(inventory.vars.images.values()), "")
    own = fleet is None
    fleet = fleet or Fleet(inventory, selected)
    try:
        outcome = fleet.run({n.name: burn_argv(n, seconds, image) for n in selected},
                            timeout=LOAD_RUNS * seconds + 120)
        results = []
        for node in selected:
            result = outcome[node.name]
            cap = node.vars.clock_cap_mhz
            if result.status == "unreachable" or (result.status == "failed"
                                                  and not result.stdout.strip()):
                verdict = UNREACHABLE if result.status == "unreachable" else "ERROR"
                results.append(BurnResult(node.name, False, verdict,
                                          result.error or result.status, cap, time=time.time(),
                                          error=result.error))
                continue
            boot_id, samples, rc, tail = parse_output(result.stdout)
            verdict, reason, max_sm, max_power = judge(samples, cap, rc, tail,
                                                       max_clock(result.stdout))
            results.append(BurnResult(node.name, verdict == OK, verdict, reason, cap, max_sm,
                                      max_power, boot_id, time.time(), samples))
        if record:
            _record(fleet, [r for r in results if r.boot_id])
        return results
    finally:
        if own:
            fleet.close()


def _record(fleet: Fleet, results: list[BurnResult]) -> None:
    """Write each result's BURN_RECORD on its node (atomically)."""
    if not results:
        return
    written = fleet.put({r.node: [(json.dumps(r.record(), sort_keys=True).encode() + b"\n",
                                   BURN_RECORD, 0o644)] for r in results})
    for r in results:
        outcome = written[r.node]
        r.recorded = outcome.ok
        if not outcome.ok:
            r.error = outcome.error
