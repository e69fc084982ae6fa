"""A transfer shows itself as it goes (issue 57 item 5): every hop's relay notes its bytes
in a file of its own, the chain reads them about every second over the fleet's SSH
connections (a real sshd on loopback), and TransferProgress shows them: a bar per node with
bytes, rate and time left on a terminal; one line per node's change of state in a pipe or
with --quiet."""

from __future__ import annotations

import glob
import io
import os
import time

import pytest
from loopback import inventory, needs_sshd
from rich.console import Console

from sparkrack.core import console
from sparkrack.fleet import Fleet
from sparkrack.remote.relay import Progress
from sparkrack.transfer.chain import PROGRESS_DIR, Hop, LocalSource, run_chain
from sparkrack.transfer.show import TransferProgress

CHUNK = 64 << 10
STEPS = 40  # 2.5 MiB over about 4 s: several readings, however busy the machine


def slow_stream():
    for _ in range(STEPS):
        time.sleep(0.1)
        yield b"x" * CHUNK


@needs_sshd
@pytest.mark.timeout(120)
def test_every_hop_of_a_chain_reports_its_bytes_as_they_come(sshd):
    seen: dict[str, list[int]] = {}
    rack = inventory(sshd)
    with Fleet(rack) as fleet:
        run = run_chain(fleet, LocalSource(slow_stream, "slow"),
                        [Hop(n, ["none"]) for n in rack.nodes],
                        on_progress=lambda node, done: seen.setdefault(node, []).append(done))
    total = STEPS * CHUNK
    assert all(run.results[n.name].ok for n in rack.nodes), run.results
    assert set(seen) == {"spark-01", "spark-02", "spark-03"}
    for node, counts in seen.items():
        assert counts == sorted(counts) and counts[-1] == total, (node, counts)
    assert any(0 < count < total for counts in seen.values() for count in counts), seen
    assert glob.glob(f"{PROGRESS_DIR}/.sparkrack-chain-*") == []  # each relay removed its own


def test_a_progress_file_is_made_new_never_through_a_link(tmp_path):
    planted = tmp_path / "target"
    planted.write_text("keep")
    link = tmp_path / "progress"
    link.symlink_to(planted)
    refused = Progress(str(link))  # a link (or any file) already there: no progress shown
    refused.note(10, now=100.0)
    refused.close()
    assert planted.read_text() == "keep" and link.is_symlink()
    path = tmp_path / "fresh"
    progress = Progress(str(path))
    progress.note(10, now=100.0)
    progress.note(20, now=100.2)  # within half a second: not written
    assert path.read_text() == '{"bytes": 10}' and oct(path.stat().st_mode & 0o777) == "0o600"
    progress.note(30, now=100.6)
    assert path.read_text() == '{"bytes": 30}'
    progress.close()
    assert not path.exists()


def on_screen(monkeypatch, terminal: bool) -> io.StringIO:
    screen = io.StringIO()
    monkeypatch.setitem(console.__dict__, "err", Console(
        file=screen, width=100, force_terminal=terminal, color_system=None, highlight=False,
        soft_wrap=True))
    return screen


def test_piped_or_quiet_it_is_one_line_per_node_state_change(monkeypatch):
    screen = on_screen(monkeypatch, terminal=False)
    total = 300 << 20
    with TransferProgress() as progress:
        for done in (0, 10 << 20, 50 << 20, 120 << 20):
            progress("spark-02 sglang:v0.5.22-cu130", done, total)
            progress("spark-03 sglang:v0.5.22-cu130", done, total)
        progress("spark-02 sglang:v0.5.22-cu130", total, total)
    lines = screen.getvalue().splitlines()
    assert lines[0] == "spark-02 sglang:v0.5.22-cu130: receiving (300.0 MiB)"
    assert lines[1] == "spark-03 sglang:v0.5.22-cu130: receiving (300.0 MiB)"
    assert lines[2].startswith("spark-02 sglang:v0.5.22-cu130: received 300.0 MiB in ")
    assert lines[3] == "spark-03 sglang:v0.5.22-cu130: stopped at 120.0 MiB of 300.0 MiB"
    assert len(lines) == 4
    screen = on_screen(monkeypatch, terminal=True)
    with TransferProgress(quiet=True) as progress:
        progress("spark-04 weights", 5, 10)
    assert screen.getvalue().splitlines()[0] == "spark-04 weights: receiving (10 B)"
    with TransferProgress(silent=True) as progress:  # --json: nothing
        progress("spark-04 weights", 5, 10)
    assert screen.getvalue().count("\n") == 2


def test_on_a_terminal_each_node_has_a_bar_with_bytes_rate_and_time_left(monkeypatch):
    screen = on_screen(monkeypatch, terminal=True)
    total = 4 << 30
    with TransferProgress() as progress:
        progress("spark-02 sglang:v0.5.22-cu130", 1 << 30, total)
        time.sleep(0.3)
        progress("spark-02 sglang:v0.5.22-cu130", 2 << 30, total)
        progress("spark-03 weights", 0, 75 << 20)
    text = screen.getvalue()
    last = [line for line in text.replace("\r", "\n").splitlines()
            if "spark-02 sglang" in line][-1]
    assert "2.0/4.0 GiB" in last and "/s" in last and "0:0" in last, text  # bytes, rate, ETA
    assert "spark-03 weights" in text
    assert os.environ.get("NO_COLOR") or "\x1b[" in text  # a live display, redrawn in place
