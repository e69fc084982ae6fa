"""Apply a node's planned changes over the fleet, in plan order, with few round trips.

Consecutive file writes go in one SFTP session (each file written beside its target and
renamed over it); consecutive commands go in one bash run that stops at the first failure
and says which command failed: a `@@<position> failed` section (the one section format,
sparkrack/facts/sections.py) with its exit code and its output, each line indented so
that none can forge a header. Image transfers are not done here (see images.py): they
involve several nodes at once. The first failure stops that node's apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkrack.facts.sections import split
from sparkrack.fleet import Fleet, NodeResult
from sparkrack.provision.changes import Change, Put, Run
from sparkrack.remote import text


@dataclass
class ApplyResult:
    """What applying one node's plan did: per change index an error (None: applied)."""

    node: str
    status: str = "ok"  # ok | failed | unreachable
    errors: dict[int, str] = field(default_factory=dict)
    applied: set[int] = field(default_factory=set)
    error: str | None = None


def sequence_argv(commands: Sequence[Sequence[str]]) -> list[str]:
    """One bash run of several argvs in order, stopping at the first that fails."""
    args: list[str] = []
    for argv in commands:
        args += [str(len(argv)), *argv]
    return ["bash", "-c", text("sequence"), "sparkrack-apply", *args]


def _steps(changes: Sequence[Change]) -> list[tuple[str, list[tuple[int, Put | Run]]]]:
    """The node's file writes and commands in plan order, consecutive ones of a kind merged."""
    steps: list[tuple[str, list[tuple[int, Put | Run]]]] = []
    for index, change in enumerate(changes):
        if not change.applies:
            continue
        for action in change.actions:
            kind = "put" if isinstance(action, Put) else "run" if isinstance(action, Run) else None
            if kind is None:
                continue
            if steps and steps[-1][0] == kind:
                steps[-1][1].append((index, action))
            else:
                steps.append((kind, [(index, action)]))
    return steps


def apply_node(fleet: Fleet, node: str, changes: Sequence[Change]) -> ApplyResult:
    """Apply one node's changes (not image transfers); stops at the first failure."""
    result = ApplyResult(node)
    for kind, batch in _steps(changes):
        indexes = [index for index, _ in batch]
        if kind == "put":
            outcome = fleet.put({node: [(a.content, a.path, a.mode) for _, a in batch]})[node]
            if not outcome.ok:
                return _failed(result, outcome, _put_culprit(batch, outcome), indexes)
        else:
            outcome = fleet.run({node: sequence_argv([a.argv for _, a in batch])})[node]
            if not outcome.ok:
                return _failed(result, outcome, _run_culprit(batch, outcome), indexes)
        result.applied.update(indexes)
    return result


def _failed(result: ApplyResult, outcome: NodeResult, culprit: tuple[int, str] | None,
            indexes: list[int]) -> ApplyResult:
    result.status = "unreachable" if outcome.status == "unreachable" else "failed"
    result.error = outcome.error
    if culprit is None:
        culprit = (indexes[0], outcome.error or outcome.status)
    index, message = culprit
    result.errors[index] = message
    result.applied.update(i for i in indexes if i < index)
    return result


def _put_culprit(batch, outcome: NodeResult) -> tuple[int, str] | None:
    text = outcome.error or ""
    for index, action in batch:
        if action.path in text:
            return index, text
    return None


def _run_culprit(batch, outcome: NodeResult) -> tuple[int, str] | None:
    failed = split(outcome.stdout).answers if outcome.status == "failed" else {}
    if not failed:
        return None
    position, lines = next(iter(failed.items()))  # the script stops at its first failure
    rc = lines[0].removeprefix("rc ") if lines else "?"
    index, action = batch[position]
    detail = " ".join(l.strip() for l in lines[1:] if l.strip())[-300:]
    return index, f"`{action.describe()}` exited {rc}" + (f": {detail}" if detail else "")
