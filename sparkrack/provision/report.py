"""What `invoke provision` prints: the plan (nodes with the same changes grouped), the
outcome of the apply, image transfers, and one recap line per node, Ansible style.

Styled with rich on a terminal, plain text otherwise (the same words either way).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from sparkrack.provision.changes import Change
from sparkrack.provision.runner import NodeRun, ProvisionReport

MARK = {"changed": ("~", "yellow"), "failed": ("✗", "bold red"), "pending": ("?", "cyan"),
        "ok": ("✓", "green"), "skipped": ("-", "dim")}


def node_names(names: Sequence[str]) -> str:
    """A compact list of node names: 'spark-01..spark-08' for a contiguous run of 3+."""
    if len(names) >= 3:
        prefix = _common_prefix(names)
        numbers = [n[len(prefix):] for n in names]
        if all(x.isdigit() for x in numbers):
            values = [int(x) for x in numbers]
            if values == list(range(values[0], values[0] + len(values))):
                return f"{names[0]}..{names[-1]} ({len(names)} nodes)"
    return ", ".join(names)


def _common_prefix(names: Sequence[str]) -> str:
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    return prefix.rstrip("0123456789")


def _line(change: Change, *, diff: bool) -> list[Text]:
    mark, style = ("!", "yellow") if change.warning and change.status == "ok" else \
        MARK.get(change.status, ("?", ""))
    what = "handler " if change.handler else ""
    text = Text(f"  {mark} ", style=style)
    text.append(f"{change.role:<12} ", style="bold")
    text.append(f"{what}{change.task}: ", style="dim")
    text.append(change.summary, style=style if change.status == "failed" else "")
    if change.warning:
        text.append(f": WARNING: {change.warning}", style="yellow")
    lines = [text]
    if diff and change.diff:
        for raw in change.diff.rstrip("\n").splitlines():
            color = ("green" if raw.startswith("+") and not raw.startswith("+++") else
                     "red" if raw.startswith("-") and not raw.startswith("---") else "dim")
            lines.append(Text("      " + raw, style=color))
    return lines


def _shown(changes: Sequence[Change]) -> list[Change]:
    return [c for c in changes if c.status in ("changed", "failed", "pending") or c.warning]


def print_plan(report: ProvisionReport, out: Console, *, diff: bool = False) -> None:
    """Per group of nodes with the same changes: each change in one line (+ diffs)."""
    title = "PLAN (check mode: nothing changes)" if report.check else "PLAN"
    if report.absent:
        title += " - unprovision"
    out.print(Text(f"{title}: roles {', '.join(report.roles)}", style="bold"))
    groups: dict[tuple, list[NodeRun]] = {}
    for run in report.nodes:
        if run.status == "unreachable" and not run.plan:
            key: tuple = ("unreachable", run.error)
        elif not run.plan and run.error:
            key = ("failed", run.error)
        else:
            key = ("plan", tuple((c.status, c.role, c.task, c.summary, c.warning, c.handler,
                                  c.diff if diff else "") for c in _shown(run.plan)),
                   sum(1 for c in run.plan if c.status == "ok"))
        groups.setdefault(key, []).append(run)
    for key, runs in groups.items():
        names = node_names([r.node for r in runs])
        if key[0] != "plan":
            out.print(Text(f"{names}: {key[0].upper()}: {key[1]}", style="bold red"))
            continue
        shown = _shown(runs[0].plan)
        if not shown:
            out.print(Text(f"{names}: no changes ({key[2]} ok)", style="green"))
            continue
        out.print(Text(f"{names}:", style="bold"))
        for change in shown:
            for line in _line(change, diff=diff):
                out.print(line)


def print_outcome(report: ProvisionReport, out: Console) -> None:
    """After an apply: what was re-applied (and where it had to be put back), failures and
    non-convergence per node, image transfers."""
    for line in refreshed_lines(report):
        out.print(Text(line, style="yellow" if "put back on" in line else "green"))
    for transfer in report.transfers:
        ok = len(transfer.ok)
        mib = transfer.bytes_sent / (1 << 20)
        text = Text(f"image {transfer.ref}: {mib:.1f} MiB from {transfer.source} to {ok}/"
                    f"{len(transfer.targets)} nodes in {transfer.seconds:.1f} s "
                    f"({transfer.chains} chain{'s' if transfer.chains > 1 else ''})",
                    style="green" if ok == len(transfer.targets) else "yellow")
        out.print(text)
    for run in report.nodes:
        bad = [c for c in run.outcomes() if c.status == "failed"]
        for change in run.second or []:
            if change.changed:
                out.print(Text(f"{run.node}: second pass (an earlier change made it stale): ",
                               style="yellow") + _line(change, diff=False)[0])
        if run.status == "unreachable" and run.plan:
            out.print(Text(f"{run.node}: UNREACHABLE during the run: {run.error}",
                           style="bold red"))
        for change in bad:
            if (run.status == "unreachable" and not run.plan):
                continue
            if any(c is change for c in run.plan):
                continue  # failed in the plan: already printed
            out.print(Text(f"{run.node}: ", style="bold red") +
                      _line(change, diff=False)[0])


def refreshed(report: ProvisionReport) -> list[dict]:
    """Each task re-applied on every run (a refresh) with the nodes where it ran and those
    where it was gone and is put back: {"role", "task", "nodes", "put_back"}."""
    done: dict[tuple[str, str], dict] = {}
    for run in report.nodes:
        applied = run.applied.applied if run.applied else set()
        for index, change in enumerate(run.plan):
            if change.refresh and change.applies and index in applied:
                item = done.setdefault((change.role, change.task), {
                    "role": change.role, "task": change.task, "nodes": [], "put_back": []})
                item["nodes"].append(run.node)
                if change.changed:
                    item["put_back"].append(run.node)
    return list(done.values())


def refreshed_lines(report: ProvisionReport) -> list[str]:
    """"clock_cap: the GPU clock lock in force: re-applied on spark-01..spark-08 (8 nodes);
    put back on spark-02", one line per refreshed task."""
    return [f"{item['role']}: {item['task']}: re-applied on {node_names(item['nodes'])}"
            + (f"; put back on {node_names(item['put_back'])}" if item["put_back"] else "")
            for item in refreshed(report)]


def print_recap(report: ProvisionReport, out: Console) -> None:
    """One line per node: ok / changed / failed / skipped / unreachable."""
    out.print(Text("RECAP", style="bold"))
    width = max((len(r.node) for r in report.nodes), default=0)
    for run in report.nodes:
        counts = report.recap(run.node)
        style = ("bold red" if counts["failed"] or counts["unreachable"] else
                 "yellow" if counts["changed"] else "green")
        text = Text(f"{run.node:<{width}} : ", style=style)
        for name in ("ok", "changed", "failed", "skipped", "unreachable"):
            text.append(f"{name}={counts[name]:<3} ")
        out.print(text)
    verb = "would change" if report.check else "changed"
    out.print(Text(f"{report.changed} task(s) {verb} on {len(report.nodes)} node(s) in "
                   f"{report.seconds:.2f} s", style="dim"))


def as_json(report: ProvisionReport) -> dict:
    """The report as plain data (secrets are already blanked out of summaries and diffs)."""
    return {
        "check": report.check, "absent": report.absent, "roles": list(report.roles),
        "seconds": round(report.seconds, 3), "exit_code": report.exit_code,
        "nodes": [{
            "node": run.node, "status": run.status, "error": run.error,
            "recap": report.recap(run.node),
            "tasks": [{"role": c.role, "task": c.task, "module": c.module, "status": c.status,
                       "summary": c.summary, "warning": c.warning, "handler": c.handler,
                       "diff": c.diff,
                       "refresh": c.refresh}
                      for c in run.outcomes()],
        } for run in report.nodes],
        "refreshed": refreshed(report),
        "transfers": [{"ref": t.ref, "image_id": t.image_id, "source": t.source,
                       "targets": list(t.targets), "errors": t.errors,
                       "bytes_sent": t.bytes_sent, "bytes_moved": t.bytes_moved,
                       "seconds": round(t.seconds, 3), "chains": t.chains}
                      for t in report.transfers],
    }
