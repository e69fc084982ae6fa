"""Node text reaches the operator's terminal escaped: an OSC 52 sequence in an engine log
or in a command's output shows as `\\x1b]52;...`, it does not write the clipboard. `invoke
logs` and `invoke run` escape it unless --raw; progress lines and errors always do."""

from __future__ import annotations

import pytest
from invoke import Context
from invoke.exceptions import Exit

from sparkrack.core.errors import SparkrackError
from sparkrack.core.terminal import escape_controls
from sparkrack.fleet.adhoc import Group, render
from sparkrack.logs.lines import LogLine, format_line

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: set the clipboard
SHOWN = "\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07"


def test_every_control_character_but_tab_and_newline_is_escaped():
    assert escape_controls(f"loaded {CLIPBOARD}weights") == f"loaded {SHOWN}weights"
    assert escape_controls("a\tb\nc") == "a\tb\nc"
    assert escape_controls("progress 10%\rprogress 99%") == "progress 10%\\x0dprogress 99%"
    assert escape_controls("\x9b2J\x7f\x00\x08") == "\\x9b2J\\x7f\\x00\\x08"  # C1 CSI, DEL, NUL
    assert escape_controls("µs → 3 ✓ \\x1b") == "µs → 3 ✓ \\x1b"  # text stays as it is


def test_log_lines_are_escaped_unless_raw():
    line = LogLine(0, 2, "spark-03", f"INFO {CLIPBOARD}ready")
    assert format_line(line) == f"[rank 2 spark-03] INFO {SHOWN}ready"
    assert format_line(line, color="33") == f"\x1b[33m[rank 2 spark-03]\x1b[0m INFO {SHOWN}ready"
    assert format_line(line, raw=True) == f"[rank 2 spark-03] INFO {CLIPBOARD}ready"


def test_run_output_is_escaped_unless_raw():
    group = Group(nodes=("spark-01",), status="ok", exit_code=0, stdout=f"out {CLIPBOARD}\n",
                  stderr="err \x1b[2J\n", errors=(("spark-01", "said \x1b[31m"),))
    shown = render([group])
    assert shown[3:] == [f"out {SHOWN}", "(stderr)", "err \\x1b[2J", "said \\x1b[31m"]
    assert render([group], raw=True)[3:] == [f"out {CLIPBOARD}", "(stderr)", "err \x1b[2J",
                                             "said \x1b[31m"]


@pytest.mark.parametrize("raw", [False, True])
def test_the_logs_task_escapes_unless_raw(monkeypatch, capsys, raw):
    from sparkrack.cli import logs_tasks
    from sparkrack.logs import readers

    def show_logs(inventory, *, emit, on_event, **options):
        on_event(f"spark-03: cannot list its containers: {CLIPBOARD}")
        emit(LogLine(0, 2, "spark-03", f"INFO {CLIPBOARD}ready"))
        return []

    monkeypatch.setattr(readers, "show_logs", show_logs)
    monkeypatch.setattr(logs_tasks, "inventory_from", lambda path: None)
    logs_tasks.logs(Context(), raw=raw)
    out, err = capsys.readouterr()
    assert out == f"[rank 2 spark-03] INFO {CLIPBOARD if raw else SHOWN}ready\n"
    assert err == f"spark-03: cannot list its containers: {SHOWN}\n"  # ours: always escaped


def test_an_error_line_with_node_text_is_escaped(monkeypatch):
    from sparkrack.cli.common import operator_task

    @operator_task
    def failing():
        raise SparkrackError(f"unpacking lib/ on spark-01 failed ({CLIPBOARD})")

    with pytest.raises(Exit) as exited:
        failing()
    assert exited.value.message == f"error: unpacking lib/ on spark-01 failed ({SHOWN})"


def test_the_tasks_offer_raw():
    import subprocess
    import sys
    from pathlib import Path

    for task in ("logs", "run"):
        done = subprocess.run([sys.executable, "-m", "invoke", "-h", task], capture_output=True,
                              text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
        assert done.returncode == 0, done.stderr
        shown = " ".join(done.stdout.split())
        assert "--raw show what the nodes printed as it is: control characters" in shown
