"""`invoke status`'s two shapes (sparkrack.status.view) as a terminal of 80, 100 and 150
columns shows them (rich, as console.print_table prints), and as a pipe gets them: every
node's name whole; at 100 columns its reachability, clock, power, clock cap and engine
whole; what differs between the nodes under the table; a failed start by its cause."""

from __future__ import annotations

import pytest
from rich.console import Console

from sparkrack.core import console
from sparkrack.facts.node import GpuFacts, NodeFacts, UnitFacts
from sparkrack.status.rows import StatusRow
from sparkrack.status.view import (
    NARROW,
    NARROW_WRAPS,
    WIDE,
    age_text,
    deployment_lines,
    differences,
    narrow_cells,
    wide_cells,
)

KERNEL = "6.17.0-1008-nvidia"
CAP = "unit ok, verified 07:57"


def row(i: int, *, reachable="ok", kernel=KERNEL, hostname=None, gpu_error=None,
        engine="sglang healthy", cap=CAP) -> StatusRow:
    node = f"spark-0{i + 1}"
    facts = None if reachable != "ok" else NodeFacts(
        hostname=hostname or node, kernel=kernel, mem_available_kb=16_462_000,
        gpu=GpuFacts(name=None if gpu_error else "NVIDIA GB10", sm_mhz=2189, max_sm_mhz=3003,
                     power_w=88.4, error=gpu_error),
        clock_cap=UnitFacts(load="loaded", active="active", result="success"))
    return StatusRow(node=node, rank=i, address=f"10.77.1.1{i + 1}", reachable=reachable,
                     error=None if facts else "timed out", seconds=0.1, facts=facts,
                     cap_state=cap if facts else "-",
                     engine=f"sparkrack-sglang-r{i} running (healthy)" if facts else None,
                     engine_brief=engine if facts else None)


HEALTHY = [row(i) for i in range(8)]
FAILED = {"engine": "sglang", "profile": "512k", "deployment_id": "sglang-512k-20261206-075819-ab12",
          "operator": "root@vm", "status": "failed", "image": "lmsysorg/sglang:v0.5.22-cu130",
          "image_id": "sha256:a156628aaad5aa", "spec_hash": "a4af6d5f8637aa",
          "error": "rank 2 on spark-03 exited (exit code 1): RuntimeError: ifa != nullptr. "
                   "Unable to find address for: enp1s0f0np0 (`invoke logs --failed` shows "
                   "rank 2's last lines)"}


def screen(rows, width: int, monkeypatch) -> list[str]:
    """The narrow table as a terminal of width columns shows it."""
    term = Console(width=width, force_terminal=True, color_system=None, record=True,
                   highlight=False, soft_wrap=True)
    monkeypatch.setitem(console.__dict__, "out", term)
    console.print_table("rack status", NARROW, [narrow_cells(r) for r in rows],
                        wrap=NARROW_WRAPS)
    return term.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100, 150])
def test_every_node_name_reads_whole_at_any_width(width, monkeypatch):
    lines = screen(HEALTHY, width, monkeypatch)
    assert all(len(line) <= width for line in lines)
    for r in HEALTHY:
        assert any(f" {r.node} " in line for line in lines), lines
    assert "…" not in "\n".join(lines)


def test_at_100_columns_each_row_reads_whole_on_one_line(monkeypatch):
    rows = HEALTHY[:4] + [row(4, reachable="unreachable")] + HEALTHY[5:]
    lines = screen(rows, 100, monkeypatch)
    for r in rows:
        line = next(line for line in lines if f" {r.node} " in line)
        if r.facts is None:
            assert "unreachable" in line
            continue
        for cell in ("ok", "2189/3003", "88.4 W", CAP, "sglang healthy"):
            assert cell in line, line


def test_at_80_columns_the_long_cells_fold_not_cut(monkeypatch):
    long = "unit active/failed, FAILED (SM clock 2850 MHz under load) 07:57"
    rows = HEALTHY[:7] + [row(7, cap=long)]
    text = " ".join(screen(rows, 80, monkeypatch))
    assert all(f" {r.node} " in text for r in rows)
    words = " ".join(text.split())
    assert "FAILED (SM clock 2850" in words or "FAILED (SM" in words
    assert "…" not in text


def test_the_hostname_column_is_gone_and_what_differs_is_said():
    assert "hostname" not in NARROW and "kernel" not in NARROW
    assert differences(HEALTHY) == [f"every node: NVIDIA GB10, kernel {KERNEL}, "
                                    "hostname = node name"]
    rows = [row(0), row(1, hostname="spark-2"), row(2, kernel="6.11.0-1016-nvidia"),
            row(3, gpu_error="nvidia-smi: not found"), row(4, reachable="unreachable"),
            *[row(i) for i in range(5, 8)]]
    assert differences(rows) == [
        "spark-02: hostname spark-2, not its node name",
        "spark-03: kernel 6.11.0-1016-nvidia (most nodes: 6.17.0-1008-nvidia)",
        "spark-04: gpu nvidia-smi: not found (most nodes: NVIDIA GB10)"]  # spark-05: no facts
    renamed = [row(0, hostname="spark-1"), *HEALTHY[1:7], row(7, reachable="unreachable")]
    assert differences(renamed) == [
        f"every node that answered: NVIDIA GB10, kernel {KERNEL}",
        "spark-01: hostname spark-1, not its node name"]


def test_the_wide_shape_is_every_column_as_pipes_get_it():
    assert WIDE[:3] == ("rank", "node", "reach") and "hostname" in WIDE and "kernel" in WIDE
    cells = wide_cells(HEALTHY[2])
    assert cells[:6] == [2, "spark-03", "ok", "spark-03", KERNEL, "NVIDIA GB10"]
    assert cells[-1] == "sparkrack-sglang-r2 running (healthy)"
    assert wide_cells(row(4, reachable="unreachable"))[:3] == [4, "spark-05", "UNREACHABLE"]


def test_a_failed_start_says_why_first_and_which_deployment_after():
    lines = deployment_lines({"failed": FAILED}, wide=False)
    assert lines[0].startswith("failed: rank 2 on spark-03 exited (exit code 1): RuntimeError")
    assert "Unable to find address for: enp1s0f0np0" in lines[0]
    assert lines[1] == "  sglang 512k, deployment sglang-512k-20261206-075819-ab12 by root@vm"
    assert len(lines) == 2


def test_an_older_failed_record_is_summed_up_the_same_way():
    quoted = ("rank 2 on spark-03 exited (exit code 1) - last log lines:\n"
              '  {"argv": ["python3", "-m", "sglang.launch_server"], "event": "start"}\n'
              "  [2026-12-06 07:58:20 TP2] Init torch distributed begin.\n"
              "  [2026-12-06 07:58:20 TP2] [rank2]: RuntimeError: [enforce fail at /pytorch/"
              "third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find "
              "address for: enp1s0f0np0")
    lines = deployment_lines({"failed": {**FAILED, "error": quoted}}, wide=False)
    assert lines[0] == ("failed: rank 2 on spark-03 exited (exit code 1): RuntimeError: ifa != "
                        "nullptr. Unable to find address for: enp1s0f0np0")


def test_a_failure_older_than_the_current_deployment_says_its_age_not_news():
    """Issue 57 item 2: a rack serving a newer deployment still showed an older `failed:`
    record as if it were news."""
    failed = {**FAILED, "started": 1_000_000.0}
    current = {**FAILED, "deployment_id": "vllm-512k-x", "engine": "vllm", "status": "serving",
               "error": "", "started": 1_000_000.0 + 3600}
    now = 1_000_000.0 + 3 * 86400 + 2 * 3600 + 30
    lines = deployment_lines({"current": current, "failed": failed}, wide=False, now=now)
    assert lines[0] == "current (serving): vllm 512k, deployment vllm-512k-x by root@vm"
    assert lines[1].startswith("failed 3 d 2 h ago, before the current deployment: rank 2 on "
                               "spark-03 exited (exit code 1)")
    assert not any(line.startswith("failed:") for line in lines)
    wide = deployment_lines({"current": current, "failed": failed}, wide=True, now=now)
    assert wide[1].startswith("failed 3 d 2 h ago, before the current deployment: sglang 512k")
    gone = deployment_lines({"last-good": current, "failed": failed}, wide=False, now=now)
    assert gone[1].startswith("failed 3 d 2 h ago, before the last-good deployment: rank 2")


def test_a_failure_newer_than_what_serves_is_news():
    failed = {**FAILED, "started": 1_000_000.0 + 60}
    current = {**FAILED, "status": "serving", "error": "", "started": 1_000_000.0}
    lines = deployment_lines({"last-good": current, "failed": failed}, wide=False,
                             now=1_000_000.0 + 90)
    assert lines[1].startswith("failed: rank 2 on spark-03 exited (exit code 1)")
    assert [age_text(s) for s in (9.5, 60, 719, 3600, 3660, 86400, 90000)] == [
        "9 s", "1 min", "11 min", "1 h", "1 h 1 min", "1 d", "1 d 1 h"]


def test_the_current_deployment_is_named_once():
    current = {**FAILED, "status": "serving", "error": ""}
    lines = deployment_lines({"current": current, "last-good": current}, wide=False)
    assert lines == ["current (serving): sglang 512k, deployment "
                     "sglang-512k-20261206-075819-ab12 by root@vm",
                     "last-good: the current deployment"]
    wide = deployment_lines({"current": current, "last-good": current}, wide=True)
    assert wide[1].startswith("last-good: sglang 512k image lmsysorg/sglang:v0.5.22-cu130 ")


def test_wide_on_a_terminal_prints_every_column_whole(monkeypatch):
    import io

    screen = io.StringIO()
    term = Console(file=screen, width=100, force_terminal=True, color_system=None,
                   highlight=False, soft_wrap=True)
    monkeypatch.setitem(console.__dict__, "out", term)
    console.print_table("rack status", WIDE, [wide_cells(r) for r in HEALTHY], whole=True)
    text = screen.getvalue()
    assert "…" not in text
    for r in HEALTHY:
        assert (f"│ {r.rank}    │ {r.node} │ ok    │ {r.node} │ {KERNEL} │ NVIDIA GB10 │"
                in text), text
        assert f"{CAP} │ sparkrack-sglang-r{r.rank} running (healthy) │" in text


def test_the_watchdogs_last_power_cycle_is_one_line_when_which_node_and_outcome():
    """Issue 53: after the watchdog power-cycled its own node, nothing but the journal of
    the previous boot said so."""
    import time

    from sparkrack.status.view import power_cycle_line

    at = 1_800_000_000.0
    record = {"node": "spark-01", "cause": "latched", "by": "the watchdog on spark-01",
              "time": at, "outcome": "ok", "line": "spark-01: back, cap unit active this "
              "boot, burn ok; sglang 512k started again in order", "deployment": "d1",
              "restarted": "d2", "record": "abc"}
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    assert power_cycle_line(record, at + 300) == (
        f"power cycle: spark-01 at {when} (5 min ago) by the watchdog on spark-01 (latched): "
        "ok: spark-01: back, cap unit active this boot, burn ok; sglang 512k started again "
        "in order")
    assert power_cycle_line(None, at) is None
    assert power_cycle_line({"node": "spark-03", "outcome": "in progress"}, at) == (
        "power cycle: spark-03 at ? by ? (?): in progress: ")
