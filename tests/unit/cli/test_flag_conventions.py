"""One flag style (sparkrack/cli/flags.py, docs/internals.md#flags): every task is made by
flags.task; a short flag means one thing in every task; nodes are chosen with --limit (the
old --nodes still accepted, saying so); a number flag takes only a number and --help says so.
A new task is held to this the moment it is added."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection, Context, Program

from sparkrack.cli import build_namespace
from sparkrack.cli.flags import NUMBERS, SHORT, Number, SparkrackTask, task

REPO = Path(__file__).resolve().parents[3]


def _tasks(collection, prefix=""):
    for name, one in collection.tasks.items():
        yield prefix + name, one
    for name, child in collection.collections.items():
        yield from _tasks(child, f"{prefix}{name}.")


TASKS = sorted(_tasks(build_namespace()), key=lambda item: item[0])
IDS = [name for name, _ in TASKS]


@pytest.mark.parametrize("name,one", TASKS, ids=IDS)
def test_every_task_is_made_by_the_conventions(name, one):
    assert isinstance(one, SparkrackTask), (
        f"{name}: made with invoke's @task; use `from sparkrack.cli.flags import task`")


@pytest.mark.parametrize("name,one", TASKS, ids=IDS)
def test_a_short_flag_means_one_thing_everywhere(name, one):
    letters = set(SHORT.values())
    for argument in one.get_arguments():
        long_name = argument.name.replace("_", "-")
        shorts = {n for n in argument.names if len(n) == 1 and n != long_name}
        if len(long_name) == 1:  # a one-letter name is its own short flag (bench.compare a b)
            assert long_name not in letters, f"{name}: -{long_name} means another flag"
            continue
        assert shorts == ({SHORT[argument.name]} if argument.name in SHORT else set()), (
            f"{name} --{long_name}: short flag {shorts}; SHORT (flags.py) decides")


@pytest.mark.parametrize("name,one", TASKS, ids=IDS)
def test_nodes_are_chosen_with_limit(name, one):
    names = {argument.name for argument in one.get_arguments()}
    own = set(one.argspec(one.body).parameters)
    assert "nodes" not in own, f"{name}: choose nodes with `limit` (--limit), not `nodes`"
    if "nodes" in names:
        assert one.renamed == {"nodes": "limit"} and "limit" in names, name


@pytest.mark.parametrize("name,one", TASKS, ids=IDS)
def test_numbers_are_numbers(name, one):
    for argument in one.get_arguments():
        help_text = (argument.help or "").lower()
        numeric = (type(argument.default) in (int, float) and argument.kind is not bool) or \
            argument.name in NUMBERS or "seconds" in help_text.split("(")[0]
        if argument.name in ("since", "reason"):  # a --since grammar (10m, 2h); a sentence
            continue
        if numeric:
            assert isinstance(argument.kind, Number), (
                f"{name} --{argument.name}: a number flag without a number kind (NUMBERS)")


def _help(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "invoke", "-h", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_shows_numbers_as_numbers():
    burn = _help("burn")
    assert "--seconds=SECONDS" in burn and "-w SECONDS, --wait=SECONDS" in burn
    restart = _help("restart-rack")
    assert "--batch-size=INT" in restart and "STRING, --wait" not in restart
    onboard = _help("onboard")
    assert "-w SECONDS, --wait=SECONDS" in onboard and "--burn-seconds=SECONDS" in onboard
    flags = re.findall(r"^  (?:-\w(?: \w+)?, )?--([\w-]+)", _help("run"), re.MULTILINE)
    assert flags == ["force", "inventory", "json", "limit", "nodes", "raw", "shell",
                     "timeout"]  # by the long name, whether it has a short one or not


@pytest.mark.parametrize("argv, line", [
    (["burn", "--seconds", "abc"], "error: --seconds abc: not a number of seconds (give "
                                   "seconds, 0 or more, e.g. --seconds 30)"),
    (["up", "sglang", "--wait", "soon"], "error: --wait soon: not a number of seconds (give "
                                         "seconds, 0 or more, e.g. --wait 30)"),
    (["restart-rack", "--batch-size", "2.5"], "error: --batch-size 2.5: not a whole number (give "
                                              "a whole number, 0 or more, e.g. --batch-size 2)"),
    (["watch", "--interval", "nan"], "error: --interval nan: not a number of seconds (give "
                                     "seconds, 0 or more, e.g. --interval 30)"),
])
def test_a_non_number_is_one_line_and_exit_2(argv, line):
    done = subprocess.run([sys.executable, "-m", "invoke", *argv, "-i", "inventory/rehearsal"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, line + "\n")


def _program(one) -> tuple:
    """(run(argv) -> (stdout, stderr)) of a namespace holding only `one`."""
    namespace = Collection(one)

    def run(*argv: str):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            Program(namespace=namespace).run(["invoke", *argv], exit=False)
        return out.getvalue(), err.getvalue()

    return run


def test_the_old_nodes_flag_says_so_and_still_chooses():
    seen = []

    @task(renamed={"nodes": "limit"})
    def pick(c, limit=None, wait=None):
        """Pick nodes."""
        seen.append(limit)

    run = _program(pick)
    assert run("pick", "--limit", "spark-02") == ("", "")
    out, err = run("pick", "--nodes", "spark-03")
    assert err == "note: --nodes is the old name of --limit; use --limit\n"
    assert seen == ["spark-02", "spark-03"]
    help_text = run("-h", "pick")[0]
    assert "-l STRING, --limit=STRING" in help_text and "--nodes=STRING" in help_text
    assert "the old name of --limit" in help_text
    with pytest.raises(SystemExit) as exited:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            Program(namespace=Collection(pick)).run(
                ["invoke", "pick", "--nodes", "a", "--limit", "b"])
    assert exited.value.code == 2
    assert err.getvalue().startswith("error: --nodes and --limit both given")
    pick(Context(), limit="x")  # called as a function, the body gets what it is given
    assert seen[-1] == "x"


def test_wait_is_w_everywhere_it_is():
    waits = {name: [n for n in a.names if len(n) == 1] for name, one in TASKS
             for a in one.get_arguments() if a.name == "wait"}
    assert len(waits) >= 17 and set(map(tuple, waits.values())) == {("w",)}, waits


def test_python_dash_m_sparkrack(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sparkrack", "--list"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "  up " in done.stdout and "  weights.stage " in done.stdout
    done = subprocess.run([sys.executable, "-m", "sparkrack", "unlock"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, (
        "error: unlock breaks another operator's lock: it needs a reason "
        "(`python -m sparkrack unlock --force 'REASON'`)\n"))
