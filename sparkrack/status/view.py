"""What `invoke status` shows of its rows: the narrow table a terminal gets (each node's
name, reachability, clock, power, clock cap and engine, whole at 100 columns), the wide
one (--wide, and every pipe: tab-separated, as scripts read it), what differs between the
nodes (a hostname unlike the node's name, a GPU or kernel unlike its peers'), and the
deployment records, a failed start by its cause first. Pure: rows in, cells and lines out.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

from sparkrack.facts.roce import ACTIVE
from sparkrack.logs.lines import reason
from sparkrack.logs.nccluse import RETRY_WINDOW_S
from sparkrack.status.rows import StatusRow

NARROW = ("rank", "node", "reach", "sm MHz", "power", "clock cap", "engine")
NARROW_WRAPS = ("clock cap", "engine")  # the columns that fold on a terminal too narrow
WIDE = ("rank", "node", "reach", "hostname", "kernel", "gpu", "sm MHz now/max", "power",
        "MemAvailable", "clock cap", "engine")
KINDS = ("current", "last-good", "failed")


def _gib(kb: int | None) -> str | None:
    return None if kb is None else f"{kb / 1048576:.1f} GiB"


def _clocks_power(row: StatusRow) -> tuple[str | None, str | None]:
    gpu = row.facts.gpu
    clocks = None if gpu.error else f"{gpu.sm_mhz}/{gpu.max_sm_mhz}"
    return clocks, None if gpu.power_w is None else f"{gpu.power_w:.1f} W"


def narrow_cells(row: StatusRow) -> list:
    """The NARROW cells of one row."""
    if row.facts is None:
        return [row.rank, row.node, row.reachable, None, None, None, None]
    return [row.rank, row.node, "ok", *_clocks_power(row), row.cap_state, row.engine_brief]


def wide_cells(row: StatusRow) -> list:
    """The WIDE cells of one row."""
    f = row.facts
    if f is None:
        return [row.rank, row.node, row.reachable.upper(), *[None] * (len(WIDE) - 3)]
    clocks, power = _clocks_power(row)
    return [row.rank, row.node, "ok", f.hostname, f.kernel, f.gpu.name or f.gpu.error, clocks,
            power, _gib(f.mem_available_kb), row.cap_state, row.engine]


def differences(rows: Sequence[StatusRow]) -> list[str]:
    """Below the narrow table: first what every node that answered shares (its GPU, its
    kernel, each hostname its node's name), then one line per node for what is its own:
    a hostname unlike its name, a GPU or kernel unlike most nodes', docker not answering."""
    answered = [r for r in rows if r.facts is not None]
    if not answered:
        return []
    shared: list[str] = []
    own: dict[str, list[str]] = {}
    for what, values in (("gpu", {r.node: r.facts.gpu.name or r.facts.gpu.error or "?"
                                  for r in answered}),
                         ("kernel", {r.node: r.facts.kernel or "?" for r in answered})):
        common = Counter(values.values()).most_common(1)[0][0]
        odd = {node: value for node, value in values.items() if value != common}
        if not odd:
            shared.append(common if what == "gpu" else f"kernel {common}")
        for node, value in odd.items():
            own.setdefault(node, []).append(f"{what} {value} (most nodes: {common})")
    renamed = [r for r in answered if r.facts.hostname != r.node]
    if not renamed:
        shared.append("hostname = node name")
    for row in renamed:
        own.setdefault(row.node, []).append(f"hostname {row.facts.hostname or '?'}, "
                                            "not its node name")
    for row in answered:
        if row.engine and row.engine.startswith("docker: "):
            own.setdefault(row.node, []).append(row.engine)
    who = "every node" if len(answered) == len(rows) else "every node that answered"
    lines = [f"{who}: " + ", ".join(shared)] if shared else []
    return lines + [f"{r.node}: " + "; ".join(own[r.node]) for r in answered if r.node in own]


OLD_TAIL = " - last log lines:"  # how a failed record's error quoted its log before


def _first_line(error: str) -> str:
    """A failed record's error in one line; an older record's quoted log lines become the
    line among them that says why (loglines.reason)."""
    first, _, rest = error.partition("\n")
    if first.endswith(OLD_TAIL):
        cause = reason(line.strip() for line in rest.splitlines())
        return first[:-len(OLD_TAIL)] + (f": {cause}" if cause else "")
    return first


def power_cycle_line(record: Mapping | None, now: float) -> str | None:
    """The watchdog's last power cycle in one line (None: none on record): when, which node,
    why, by whom, and how it ended."""
    if not record:
        return None
    import time

    at = record.get("time")
    when = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
            + f" ({age_text(now - at)} ago)") if isinstance(at, (int, float)) else "?"
    return (f"power cycle: {record.get('node', '?')} at {when} by {record.get('by', '?')} "
            f"({record.get('cause', '?')}): {record.get('outcome', '?')}: "
            f"{record.get('line', '')}")


def nccl_line(record: Mapping | None, current: Mapping | None,
              ports: Mapping[str, Mapping[str, str]] | None = None) -> str | None:
    """What the running deployment's ranks' NCCL uses, in one line (None: no record of
    this deployment): every rank's network when they agree, else each degraded rank's. A
    rank whose HCA's port is down now (ports: {node: {HCA of nccl_ib_hca: state}}, read by
    this status; '' no such device) runs on fewer rails than it started on."""
    if not record or not current or record.get("deployment") != current.get("deployment_id"):
        return None
    ranks = [r for r in record.get("ranks") or [] if isinstance(r, dict)]
    down = {id(r): _down_now(r, (ports or {}).get(str(r.get("node")), {})) for r in ranks}
    odd = [r for r in ranks if r.get("degraded") or not r.get("said") or down[id(r)]]
    common = Counter(str(r.get("uses")) for r in ranks if r not in odd).most_common(1)
    parts = [f"rank {r.get('rank')} on {r.get('node')}: {r.get('uses')}"
             + (_down_text(r, down[id(r)]) if down[id(r)] else
                " (DEGRADED: fewer rails than nccl_ib_hca"
                + (", started with --allow-degraded)" if record.get("allowed") else ")")
                if r.get("degraded") else "") for r in odd]
    if common:
        rest = "every rank" if not odd else f"the other {len(ranks) - len(odd)}"
        parts.append(f"{rest}: {common[0][0]}")
    return "nccl: " + "; ".join(parts) if parts else None


def _down_now(rank: Mapping, ports: Mapping[str, str]) -> dict[str, str]:
    """{HCA: its state} of each HCA the rank's NCCL said at init whose port is not ACTIVE
    now (an HCA this status did not read is not judged)."""
    used = [str(h).split(":")[0] for h in rank.get("hcas") or []]
    return {h: ports[h] for h in used if h in ports and ports[h] != ACTIVE}


def _down_text(rank: Mapping, down: Mapping[str, str]) -> str:
    used = len(rank.get("hcas") or [])
    return (f" (DEGRADED now: the port of {', '.join(down)} is down "
            f"({', '.join(s or 'no such device' for s in down.values())}), "
            f"{used - len(down)} of {used} rails; NCCL fails that rail once the HCA's retries "
            f"are spent (about {RETRY_WINDOW_S:.0f} s) and the group with it: reseat the cable)")


def superseded(records: Mapping[str, dict | None]) -> str | None:
    """The kind of the record that started after the failed one ("current", else
    "last-good"), or None: the failure is the latest news."""
    failed = records.get("failed") or {}
    if failed.get("started") is None:
        return None
    for kind in ("current", "last-good"):
        started = (records.get(kind) or {}).get("started")
        if started is not None and started > failed["started"]:
            return kind
    return None


def age_text(seconds: float) -> str:
    """An age as the status line says it: 40 s, 12 min, 3 h 5 min, 2 d 4 h."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes} min"
    if days < 1:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{days} d {hours % 24} h" if hours % 24 else f"{days} d"


def deployment_lines(records: Mapping[str, dict | None], wide: bool,
                     now: float | None = None) -> list[str]:
    """The head's deployment records, one line each (wide: image, spec and weights too). A
    failed start (narrow) says why first, then which deployment it was, on its own line; one
    older than a start since (the current or last-good deployment) is history, not news: its
    line says its age and what came after (now: this machine's clock)."""
    lines = []
    since = superseded(records)
    for kind in KINDS:
        dep = records.get(kind)
        if not dep:
            continue
        by = f" by {dep['operator']}" if dep.get("operator") else ""
        state = f" ({dep['status']})" if kind == "current" and dep.get("status") else ""
        error = dep.get("error") if kind == "failed" else None
        if kind == "failed" and since:  # history, not news: its age and what came after
            age = age_text((time.time() if now is None else now) - dep["started"])
            state = f" {age} ago, before the {since} deployment"
        if wide:
            weights = (f" weights {dep['model_path']} {dep['weights_digest'][:12]}"
                       if dep.get("weights_digest") else "")
            image = (f"{dep['image']} ({dep['image_id'][:19]})" if dep.get("image")
                     else dep["image_id"][:19])
            lines.append(f"{kind}{state}: {dep['engine']} {dep['profile']} image {image} "
                         f"spec {dep['spec_hash'][:12]}{weights} deployment "
                         f"{dep['deployment_id']}{by}" + (f": {error}" if error else ""))
            continue
        current = records.get("current")
        if kind == "last-good" and current and current["deployment_id"] == dep["deployment_id"]:
            lines.append("last-good: the current deployment")
            continue
        which = f"{dep['engine']} {dep['profile']}, deployment {dep['deployment_id']}{by}"
        if error:
            lines += [f"failed{state}: {_first_line(error)}", f"  {which}"]
        else:
            lines.append(f"{kind}{state}: {which}")
    return lines
