"""What the operator reads, on a real terminal: `invoke status`, a failed `invoke up` and
`invoke --list` run in tmux at 80, 100 and 150 columns, their screens read back with
`tmux capture-pane`. Every node's name reads whole; at 100 columns each node's reachability,
clock, power, clock cap and engine too; a failure's cause is within its first two lines;
no task's help line stops mid-sentence.

A refused start: spark-03's fabric netdev without its address (flushed), which `up`'s
fabric address gate refuses before any rank starts. A failed start: rank 2 of the engine
ends at start (the stub's exit_at_start), so the group goes down and `status` and
`logs --failed` name it. SPARKRACK_KEEP_SCREENS=DIR keeps every captured screen there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stubgroup import nothing_runs

from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
WIDTHS = (80, 100, 150)
NODES = [f"spark-0{i}" for i in range(1, 9)]
CAUSE = "RuntimeError: rank 2 failed at start (sparkrack stub fault: exit_at_start)"
REFUSAL_FIX = "`invoke provision --role fabric` writes and applies the fabric's netplan"


class Terminal:
    """A tmux server of its own (its own socket, no user config): each command runs in a
    fresh session of the given size, and its screen (scrollback included) is read back."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.socket = f"sparkrack-test-{os.getpid()}"
        self.count = 0
        self.tmux("new-session", "-d", "-s", "keeper", "sleep 86400")  # the server stays up

    def tmux(self, *args: str) -> str:
        # the server's environment is every pane's: without the COLUMNS and LINES a test
        # runner may export (a shell on a real terminal keeps them unexported, if at all)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30, env=env)
        assert done.returncode == 0, f"tmux {' '.join(args[:3])}: {done.stderr}"
        return done.stdout

    def run(self, argv: list[str], width: int, timeout: float = 180) -> tuple[int, list[str]]:
        """(exit code, the screen's lines) of argv run from the repository at width."""
        self.count += 1
        rc = self.folder / f"rc-{self.count}"
        env = {k: os.environ[k] for k in ("PATH", "SPARKRACK_SANDBOX", "SPARKRACK_STATE_DIR")
               if k in os.environ}
        command = (f"cd {shlex.quote(str(REPO))} && env {shlex.join(f'{k}={v}' for k, v in env.items())}"
                   f" {shlex.join(argv)}; echo $? > {shlex.quote(str(rc))}; sleep 3600")
        name = f"screen{self.count}"
        self.tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", "60", command)
        deadline = time.monotonic() + timeout
        while not (rc.exists() and rc.read_text().strip()):
            assert time.monotonic() < deadline, f"{argv} did not end in {timeout} s"
            time.sleep(0.2)
        screen = self.tmux("capture-pane", "-p", "-t", name, "-S", "-", "-E", "-")
        self.tmux("kill-session", "-t", name)
        return int(rc.read_text()), screen.rstrip("\n").splitlines()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=30)


@pytest.fixture(scope="module")
def terminal(tmp_path_factory):
    if shutil.which("tmux") is None:
        message = "tmux is missing: apt-get install tmux (.ci/run installs it)"
        if os.environ.get("CI") or os.environ.get("SPARKRACK_CI"):
            pytest.fail(message)
        pytest.skip(message)
    term = Terminal(tmp_path_factory.mktemp("tmux"))
    yield term
    term.close()


def keep(name: str, screen: list[str]) -> None:
    """Keep a captured screen in $SPARKRACK_KEEP_SCREENS, when set."""
    folder = os.environ.get("SPARKRACK_KEEP_SCREENS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.txt").write_text("\n".join(screen) + "\n")


def invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


def status_json() -> dict:
    import json

    done = subprocess.run(invoke("status", "--json", "-i", "inventory/rehearsal"), cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    return {row["node"]: row for row in json.loads(done.stdout)["nodes"]}


def node_line(screen: list[str], node: str) -> str:
    """The one screen line that shows node's row; fails when its name is not whole."""
    found = [line for line in screen if re.search(rf"(?<![\w-]){node}(?![\w-])", line)
             and not line.startswith(("every node", f"{node}:"))]
    assert found, f"{node} is not whole on the screen:\n" + "\n".join(screen)
    return found[0]


def table(screen: list[str]) -> list[str]:
    """status's table: its lines up to the first line under it (every node: ...)."""
    return screen[:next((i for i, line in enumerate(screen) if line.startswith("every node")),
                        len(screen))]


def failure(screen: list[str], opening: str) -> str:
    """The failure that starts with opening, as one text without spaces: with its
    continuation lines (indented: sparkrack broke it at spaces), else with the next line
    (a word the terminal wrapped reads across the line break)."""
    start = next((i for i, line in enumerate(screen) if line.startswith(opening)), None)
    assert start is not None, f"no line opens with {opening!r}:\n" + "\n".join(screen)
    end = start + 1
    while end < len(screen) and screen[end].startswith("  "):
        end += 1
    return "".join(screen[start:max(end, start + 2)]).replace(" ", "")


def broken_at_spaces(screen: list[str], opening: str, width: int) -> bool:
    """Whether the lines of the failure that starts with opening are within width and
    each continuation line is indented (sparkrack broke them at spaces, not the terminal)."""
    start = next(i for i, line in enumerate(screen) if line.startswith(opening))
    end = start + 1
    while end < len(screen) and screen[end].startswith("  "):
        end += 1
    return all(len(line) < width for line in screen[start:end]) and (
        end > start + 1 or len(screen[start]) < width)


@pytest.fixture
def serving(engine_rack):
    """SGLang serving on the rehearsal rack (the stub engines); nothing runs afterwards."""
    lanes.down(engine_rack)
    lanes.up(engine_rack, "sglang", "512k")
    yield engine_rack
    lanes.down(engine_rack)


def test_status_of_a_healthy_rack_reads_whole(serving, terminal):
    for width in WIDTHS:
        code, screen = terminal.run(invoke("status", "-i", "inventory/rehearsal"), width)
        keep(f"status-healthy-{width}", screen)
        assert code == 0, screen
        assert all(len(line) <= width for line in screen)
        assert "…" not in "\n".join(table(screen)), screen  # (an old failure's reason may be)
        rows = {node: node_line(screen, node) for node in NODES}
        assert "hostname" not in next(line for line in screen if "node" in line and "reach" in line)
        assert any(line.startswith("every node: NVIDIA GB10, kernel 6.17.0-1008-nvidia, "
                                   "hostname = node name") for line in screen), screen
        if width < 100:
            continue
        assert any(re.fullmatch(r"current \(serving\): sglang 512k, deployment \S+ by \S+", line)
                   for line in screen), screen  # the lines under the table: one each
        facts = status_json()
        for node, line in rows.items():
            cells = re.split(r"\s{2,}", line.strip())
            assert cells[1:3] == [node, "ok"], line
            assert re.fullmatch(r"\d+/3003", cells[3]) and re.fullmatch(r"\d+\.\d W", cells[4])
            assert cells[5:] == [facts[node]["cap_state"], facts[node]["engine_brief"]], line
            assert cells[6].startswith("sglang ")


@pytest.fixture
def fabric_address_lost(engine_rack):
    """spark-03's fabric netdev without its address (NetworkManager dropped it after a
    reboot); afterwards provisioned back (the fabric role restores it)."""
    lanes.down(engine_rack)
    with Fleet(engine_rack, [engine_rack.node("spark-03")]) as fleet:
        assert fleet.run(["ip", "addr", "flush", "dev", "enp1s0f0np0"])["spark-03"].ok
    try:
        yield engine_rack
    finally:
        again = subprocess.run(invoke("provision", "-i", "inventory/rehearsal", "--limit",
                                      "spark-03"), cwd=REPO, capture_output=True, text=True,
                               timeout=180)
        assert again.returncode == 0, again.stdout + again.stderr


@pytest.fixture
def rank_2_fails_at_start(engine_rack):
    """The engine's rank 2 ends at start (an engine build that crashes on that node's
    start); the next engine_rack puts the rack's stub settings back."""
    from rackhealth import STUB_CONFIG

    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    lanes.down(engine_rack)
    with Fleet(engine_rack) as fleet:
        write_stub_model(fleet, {**STUB_CONFIG, "ranks": {"2": {"exit_at_start": True}}})
    yield engine_rack
    lanes.down(engine_rack)


def test_a_refused_up_names_the_node_and_the_fix_first(fabric_address_lost, terminal):
    for width in WIDTHS:
        code, screen = terminal.run(invoke("up", "--engine", "sglang", "-i",
                                           "inventory/rehearsal"), width)
        keep(f"up-refused-{width}", screen)
        assert code == 1, screen
        assert failure(screen, "error:").startswith(
            "error:sglang512krefused:fabricaddresses:spark-03:enp1s0f0np0(rocep1s0f0)hasno"
            "IPv4address"), screen
        assert REFUSAL_FIX.replace(" ", "") in failure(screen, "error:"), screen
        assert broken_at_spaces(screen, "error:", width), screen  # no word cut in two
    assert [r for r in nothing_runs(fabric_address_lost) if r.alive] == []


def test_a_failed_up_and_status_with_a_node_cut_name_the_cause_first(rank_2_fails_at_start,
                                                                     rack, terminal):
    code, screen = terminal.run(invoke("up", "--engine", "sglang", "-i",
                                       "inventory/rehearsal"), WIDTHS[0])
    keep(f"up-failed-{WIDTHS[0]}", screen)
    assert code == 1, screen
    assert ("rank2onspark-03exited(exitcode1):" + CAUSE.replace(" ", "")) in failure(
        screen, "error:"), screen
    assert broken_at_spaces(screen, "error:", WIDTHS[0]), screen  # no word cut in two
    assert '"argv"' not in "\n".join(screen) and '"env"' not in "\n".join(screen)

    kept = subprocess.run(invoke("logs", "--failed", "-i", "inventory/rehearsal"), cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert kept.returncode == 0, kept.stderr
    assert "[rank 2 spark-03] [" in kept.stdout and CAUSE in kept.stdout, kept.stdout
    assert '"event": "start"' in kept.stdout

    rack.cut("spark-05")
    try:
        for width in WIDTHS:
            code, screen = terminal.run(invoke("status", "-i", "inventory/rehearsal"), width)
            keep(f"status-cut-failed-{width}", screen)
            assert code == 1, screen
            assert "…" not in "\n".join(table(screen)), screen
            rows = {node: node_line(screen, node) for node in NODES}
            assert "unreachable" in rows["spark-05"]
            assert CAUSE.replace(" ", "") in failure(screen, "failed: rank 2 on spark-03"), screen
            assert any(line.startswith("spark-05: unreachable: ") for line in screen), screen
            if width >= 100:
                assert all(re.search(r" ok +\d+/3003 +\d+\.\d W +unit ok, ", rows[node])
                           for node in NODES if node != "spark-05"), rows
    finally:
        rack.heal("spark-05")


def test_every_help_line_of_the_task_list_reads_whole(terminal):
    for width in WIDTHS:
        code, screen = terminal.run(invoke("--list"), width)
        keep(f"list-{width}", screen)
        assert code == 0, screen
        entries: list[list[str]] = []
        for line in screen[2:]:
            if re.match(r"  \S", line):  # a task: its name, then its help's first row
                entries.append(re.split(r"\s{2,}", line.strip(), maxsplit=1)[1:])
            elif line.strip() and entries:
                entries[-1].append(line.strip())
        assert len(entries) > 50, screen
        for entry in entries:
            text = " ".join(entry)
            assert text.endswith("."), f"cut mid-sentence at {width} columns: {text!r}"
