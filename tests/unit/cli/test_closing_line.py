"""A task's closing line (its error) on a terminal is broken at spaces to the terminal's
width, never mid-word; into a pipe it stays one line (issue 57 item 2: a failed `up`'s cause
was cut mid-word by the terminal)."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from sparkrack.core.terminal import wrap

REPO = Path(__file__).resolve().parents[3]
CAUSE = ("rank 2 on spark-03 exited (exit code 1): RuntimeError: [enforce fail at "
         "/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable "
         "to find address for: enp1s0f0np0")
FIX = "the rank's fabric netdev has no address: `invoke provision` puts it back"
SCRIPT = f"""
from invoke import Collection, Program
from sparkrack.cli.common import operator_task
from sparkrack.cli.flags import task
from sparkrack.core.errors import SparkrackError

@task
@operator_task
def fail(c):
    raise SparkrackError({CAUSE!r}, fix={FIX!r})

Program(namespace=Collection(fail)).run(["invoke", "fail"])
"""
LINE = f"error: {CAUSE} ({FIX})"


def on_a_terminal(columns: int) -> tuple[int, list[str]]:
    """(exit code, the lines the terminal shows) of SCRIPT run on a pty of columns."""
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=child, stdout=child,
                            stderr=child, cwd=REPO, close_fds=True)
    os.close(child)
    output = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            proc.kill()
            pytest.fail(f"no output in 60 s: {output!r}")
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child side closed: EIO
            break
        if not chunk:
            break
        output += chunk
    os.close(main)
    return proc.wait(timeout=60), output.decode().replace("\r\n", "\n").splitlines()


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_on_a_terminal_the_line_breaks_at_spaces_within_its_width(columns):
    code, lines = on_a_terminal(columns)
    assert code == 1, lines
    assert all(len(line) <= columns for line in lines), lines
    assert lines[0].startswith("error: rank 2 on spark-03") and len(lines) > 1, lines
    assert all(line.startswith("  ") for line in lines[1:]), lines
    assert " ".join(line.strip() for line in lines) == LINE  # every word whole, in order


def test_into_a_pipe_it_stays_one_line():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, LINE + "\n")


def test_a_word_longer_than_the_line_stands_whole():
    text = "error: cannot read /var/lib/sparkrack/a-very-long-path-name-that-fills-a-line x"
    lines = wrap(text, 30).splitlines()
    assert "  /var/lib/sparkrack/a-very-long-path-name-that-fills-a-line" in lines, lines
    assert " ".join(line.strip() for line in lines) == text
