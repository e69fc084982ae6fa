"""`invoke run`: one ad-hoc command on every node, the output grouped by identical result.

The command is an argv (everything after `--` on the invoke command line), or one shell
line given with `--shell`, which runs as `sh -c LINE`; either way the fleet quotes it once
(fleet_argv.quote_argv) and nothing here builds a command string. Nodes that answered the
same thing (status, exit code, stdout and stderr all equal) are shown once under a compact
list of their names, as `dshbak -c` does: `spark-[01-03,05]`. Read-only by convention:
nothing stops a command that changes a node, so use the tasks that own a change for it.
Pure except run_adhoc.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sparkrack.core.errors import UsageError
from sparkrack.core.terminal import escape_controls
from sparkrack.fleet.results import FleetResult, NodeResult

RULE = "-" * 16


@dataclass(frozen=True)
class Group:
    """Nodes whose result was the same; errors holds each node's own message (unreachable,
    timed out), which names the node and so never matches another's."""

    nodes: tuple[str, ...]
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    errors: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """The node names compressed, e.g. 'spark-[01-03,05]'."""
        return compress(self.nodes)

    @property
    def outcome(self) -> str:
        """'exit 0', 'exit 3', 'failed' (no exit code: timed out, killed) or 'unreachable'."""
        if self.exit_code is not None:
            return f"exit {self.exit_code}"
        return self.status

    def as_dict(self) -> dict:
        """Plain data for --json."""
        return {"nodes": list(self.nodes), "label": self.label, "status": self.status,
                "exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                "errors": dict(self.errors)}


def remainder_of(argv: Sequence[str]) -> list[str]:
    """The words after the first `--` of a command line (invoke splits there too, but hands
    tasks only their joined text, which loses the boundaries between arguments)."""
    argv = list(argv)
    return argv[argv.index("--") + 1:] if "--" in argv else []


def command_argv(remainder: Sequence[str], shell: str | None) -> list[str]:
    """The argv to run: the remainder as is, or ["sh", "-c", shell]; UsageError when both
    or neither are given."""
    if shell is not None and remainder:
        raise UsageError("give the command either after `--` or with --shell, not both",
                         fix="invoke run -- CMD ARGS..., or invoke run --shell 'a | b'")
    if shell is not None:
        if not shell.strip():
            raise UsageError("--shell needs a command line", fix="e.g. --shell 'dmesg | tail -3'")
        return ["sh", "-c", shell]
    if not remainder:
        raise UsageError("no command to run",
                         fix="invoke run [--limit ...] -- CMD ARGS..., or --shell 'pipeline'")
    return list(remainder)


def group_results(results: Iterable[NodeResult]) -> list[Group]:
    """The results grouped by identical (status, exit code, stdout, stderr), in the order
    each group's first node comes (rank order for a FleetResult)."""
    groups: dict[tuple, list[NodeResult]] = {}
    for result in results:
        key = (result.status, result.exit_code, result.stdout, result.stderr)
        groups.setdefault(key, []).append(result)
    return [Group(nodes=tuple(r.node for r in members), status=status, exit_code=code,
                  stdout=stdout, stderr=stderr,
                  errors=tuple((r.node, r.error) for r in members
                               if r.error and (code is None or status == "unreachable")))
            for (status, code, stdout, stderr), members in groups.items()]


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """Node names as dshbak and pdsh write them: 'spark-[01-03,05],head'. Names sharing a
    prefix and a number width are folded; the others are listed as they are."""
    folded: dict[tuple[str, int] | str, list[int]] = {}
    for name in names:
        match = _NUMBERED.match(name)
        if match:
            prefix, digits = match.groups()
            folded.setdefault((prefix, len(digits)), []).append(int(digits))
        else:
            folded.setdefault(name, [])
    parts = []
    for key, numbers in folded.items():
        if isinstance(key, str):
            parts.append(key)
            continue
        prefix, width = key
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        spans = _spans(numbers)
        parts.append(prefix + "[" + ",".join(
            f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}"
            for lo, hi in spans) + "]")
    return ",".join(parts)


def _spans(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct numbers as (first, last) runs of consecutive ones."""
    spans: list[tuple[int, int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], number)
        else:
            spans.append((number, number))
    return spans


def render(groups: Sequence[Group], raw: bool = False) -> list[str]:
    """The text `invoke run` prints: per group a header naming its nodes and outcome, then
    its output once (stderr after a `(stderr)` line), then each node's own error; what the
    nodes said with its control characters escaped (terminal.escape_controls) unless raw."""
    shown = (lambda text: text) if raw else escape_controls
    lines: list[str] = []
    for group in groups:
        count = len(group.nodes)
        lines += [RULE, f"{group.label} ({count} node{'s' if count != 1 else ''}): "
                  f"{group.outcome}", RULE]
        lines += shown(group.stdout).splitlines()
        if group.stderr:
            lines.append("(stderr)")
            lines += shown(group.stderr).splitlines()
        lines += [shown(error) for _, error in group.errors]
    return lines


def as_json(command: Sequence[str], result: FleetResult) -> dict:
    """What --json prints: the command, every node's outcome, the groups, the summary."""
    return {"command": list(command), "ok": result.all_ok, "summary": result.summary(),
            "nodes": [{"node": r.node, "status": r.status, "exit_code": r.exit_code,
                       "stdout": r.stdout, "stderr": r.stderr, "error": r.error,
                       "seconds": round(r.duration, 3)} for r in result],
            "groups": [group.as_dict() for group in group_results(result)]}


def run_adhoc(inventory, argv: Sequence[str], nodes: str | None = None,
              timeout: float | None = None) -> FleetResult:
    """argv on every selected node at once (--limit: names or groups)."""
    from sparkrack.fleet import Fleet

    with Fleet(inventory, inventory.select(nodes)) as fleet:
        return fleet.run(list(argv), timeout=timeout)
