"""The chaos run's report: steps, commands by outcome, faults by kind, the violations (each
with its seed and step, to replay), recovery time per fault kind."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from sparkrack.rehearsal.chaos.runner import StepResult


def outcome(code: int | None) -> str:
    """A command's exit code as the operator reads it."""
    return {0: "ok", 1: "failed", 2: "usage", 3: "refused (lock)", 130: "interrupted",
            None: "no exit"}.get(code, f"exit {code}")


@dataclass
class Report:
    """The results of one seeded run."""

    seed: int
    results: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0
    ending: list[str] = field(default_factory=list)  # violations putting the rack back

    def violations(self) -> list[str]:
        return [f"seed {self.seed} step {r.step.index} ({r.step.describe()}): {v}"
                for r in self.results for v in r.violations] + \
            [f"seed {self.seed} at the end (the first head put back): {v}" for v in self.ending]

    def as_dict(self) -> dict:
        ops = Counter((r.step.op, outcome(r.exit_code)) for r in self.results)
        faults = Counter(r.step.fault.kind for r in self.results if r.step.fault
                         and r.injected and not r.injected.startswith("not injected"))
        recovery = defaultdict(list)
        for r in self.results:
            if r.recovery_s is not None:
                recovery[r.step.fault.kind].append(r.recovery_s)
        return {
            "seed": self.seed, "steps": len(self.results), "seconds": round(self.seconds, 1),
            "operations": {f"{op} {out}": n for (op, out), n in sorted(ops.items())},
            "faults_injected": dict(sorted(faults.items())),
            "faults_not_injected": sum(1 for r in self.results if r.injected
                                       and r.injected.startswith("not injected")),
            "recovery_s": {kind: {"n": len(v), "median": round(statistics.median(v), 1),
                                  "max": round(max(v), 1)}
                           for kind, v in sorted(recovery.items())},
            "head_swaps_s": [round(r.head_swap_s, 1) for r in self.results
                             if r.head_swap_s is not None],
            "violations": self.violations(),
        }

    def lines(self) -> list[str]:
        """The report as plain lines."""
        data = self.as_dict()
        out = [f"seed {self.seed}: {data['steps']} steps in {data['seconds']:.0f} s, "
               f"{len(data['violations'])} violation(s)"]
        out.append("operations: " + ", ".join(f"{k} {v}" for k, v in data["operations"].items()))
        out.append("faults injected: " + (", ".join(f"{k} {v}" for k, v in
                                                    data["faults_injected"].items()) or "none")
                   + f" (not injected, the command ended first: {data['faults_not_injected']})")
        for kind, figures in data["recovery_s"].items():
            out.append(f"recovery after {kind}: median {figures['median']} s, max "
                       f"{figures['max']} s ({figures['n']})")
        if data["head_swaps_s"]:
            out.append(f"head replaced by the spare: {len(data['head_swaps_s'])} time(s), in "
                       + ", ".join(f"{s} s" for s in data["head_swaps_s"]))
        out += [f"VIOLATION {v}" for v in data["violations"]]
        return out
