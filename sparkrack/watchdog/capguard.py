"""The clock cap put back on a serving GPU that lost it (gpuwatch's `over-cap`).

The cap is the clock-cap unit's lock (`ExecStart=nvidia-smi -lgc 0,CAP`, `ExecStop=
nvidia-smi -rgc`). A driver reload, a GPU reset or an out-of-memory event drops the lock
while the oneshot unit still reads active, so the unit is restarted (its stop resets,
its start locks again) and, in the same command, the unit's state and the GPU's clock are
read back: the cap took when the unit succeeded and the clock is at or under the cap.
The finding and the outcome both go to the audit log (`<by>:cap-reapplied`, outcome ok or
failed). A node is re-applied at most once per REAPPLY_EVERY_S: a cap that does not take
is not restarted every second (the metric and its alert stay up instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.facts.node import CLOCK_CAP_UNIT
from sparkrack.fleet import Fleet, sh
from sparkrack.inventory import Inventory
from sparkrack.watchdog.gpuwatch import Finding

REAPPLY_EVERY_S = 30.0
RESTART = ('systemctl restart "$1"; systemctl show -p ActiveState -p Result "$1"; '
           'nvidia-smi --query-gpu=clocks.sm,utilization.gpu --format=csv,noheader,nounits')


@dataclass(frozen=True)
class Reapplied:
    """What restarting the cap unit did on one node."""

    node: str
    took: bool
    line: str  # one line for the operator
    unit: str  # "ActiveState/Result" after the restart, or the error
    sm_mhz: int | None = None  # the clock read right after
    util: int | None = None


def judge_restart(node: str, cap_mhz: int, status: str, text: str, error: str = "") -> Reapplied:
    """The outcome of RESTART's output on node (status: the command's fleet status)."""
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    unit = f"{props.get('ActiveState', '?')}/{props.get('Result', '?')}"
    numbers = next((line for line in text.splitlines() if "," in line and "=" not in line), "")
    clock, util = (int(v) if v.strip().isdigit() else None
                   for v in (numbers.split(",") + ["", ""])[:2])
    if status != "ok" and not props:
        return Reapplied(node, False, f"{node}: could not restart {CLOCK_CAP_UNIT}: "
                         f"{error or status}", error or status)
    took = unit == "active/success" and clock is not None and clock <= cap_mhz
    after = "no clock reading" if clock is None else f"{clock} MHz at {util} %"
    if took:
        return Reapplied(node, True, f"{node}: clock cap re-applied ({CLOCK_CAP_UNIT} "
                         f"restarted, {unit}): GPU at {after}, under the {cap_mhz} MHz cap",
                         unit, clock, util)
    return Reapplied(node, False, f"{node}: the clock cap did not take ({CLOCK_CAP_UNIT} "
                     f"{unit}, GPU at {after}; cap {cap_mhz} MHz): the node draws uncapped "
                     f"power; see journalctl -u {CLOCK_CAP_UNIT} on {node}", unit, clock, util)


def reapply_cap(fleet: Fleet, inventory: Inventory, finding: Finding, by: str) -> Reapplied:
    """Restart the cap unit on finding's node, check it took, audit both."""
    cap = inventory.vars.clock_cap_mhz
    result = fleet.run({finding.node: sh(RESTART, CLOCK_CAP_UNIT)}, timeout=30)[finding.node]
    done = judge_restart(finding.node, cap, result.status, result.stdout,
                         result.error or result.stderr.strip())
    record_reapplied(fleet, inventory, finding, done, by)
    return done


def record_reapplied(fleet: Fleet, inventory: Inventory, finding: Finding, done: Reapplied,
                     by: str) -> list[str]:
    """The audit record of one re-application: what was found, what the restart gave."""
    from sparkrack.oplock import audit

    record = audit.new_record(inventory, f"{by}:cap-reapplied", {"node": finding.node})
    record.note(node=finding.node, rank=finding.rank, found=dict(finding.evidence),
                unit=done.unit, after={"sm_mhz": done.sm_mhz, "util": done.util},
                took=done.took, line=done.line)
    return audit.log_unlocked(fleet, record, "ok" if done.took else "failed",
                              **({} if done.took else {"error": done.line}))
