"""Under the `sparkrack` command, help and error lines name `sparkrack TASK`, as typed."""

import contextlib
import io

import pytest

from sparkrack.cli import Sparkrack, build_namespace
from sparkrack.core import console


@pytest.fixture
def typed():
    """(argv -> stdout) of the sparkrack command run in this process."""
    namespace = build_namespace()

    def run(*argv: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            Sparkrack(name="sparkrack", binary="sparkrack", namespace=namespace).run(
                ["sparkrack", *argv], exit=False)
        return out.getvalue()

    yield run
    console.COMMAND["name"] = "invoke"


@pytest.mark.parametrize("task", ["burn", "export", "run", "unlock"])
def test_task_help_names_the_sparkrack_command(typed, task):
    text = typed("-h", task)
    assert text.startswith(f"Usage: sparkrack [--core-opts] {task} ")
    assert "`sparkrack " in text and "`invoke " not in text


def test_error_lines_too_and_invoke_keeps_its_own_name(typed):
    typed("--list")
    assert console.as_typed("run `invoke provision` first") == "run `sparkrack provision` first"
    console.COMMAND["name"] = "invoke"
    assert console.as_typed("run `invoke provision` first") == "run `invoke provision` first"


def test_an_error_line_names_the_command_typed():
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", "import sys; from sparkrack.cli import main; "
                           "sys.argv[0] = 'sparkrack'; main()", "unlock"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: unlock breaks another operator's lock: it needs a reason "
        "(`sparkrack unlock --force 'REASON'`)"]


def test_every_task_takes_its_inventory_as_dash_i():
    """`-i DIR` is the inventory on every task that has one: no other argument (an --image,
    say) may take the short flag first."""
    def tasks(collection, prefix=""):
        for name, task in collection.tasks.items():
            yield prefix + name, task
        for name, sub in collection.collections.items():
            yield from tasks(sub, f"{prefix}{name}.")

    wrong = {}
    for name, task in tasks(build_namespace()):
        arguments = {arg.name: arg for arg in task.get_arguments()}
        if "inventory" in arguments and "i" not in arguments["inventory"].nicknames:
            wrong[name] = arguments["inventory"].nicknames
    assert wrong == {}


@pytest.mark.parametrize("argv", [["up", "--help"], ["plan", "-h"], ["roll", "--help"]])
def test_help_after_a_task_with_a_positional_is_refused_before_anything_runs(argv):
    """invoke reads `up --help` as up's ENGINE: one line saying how to get the help, exit 2,
    and no lock taken, no node contacted (the example inventory's nodes are refused)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=repo, text=True,
                          capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "SPARKRACK_INVENTORY": "inventory/rack"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"error: {argv[1]} was read as an argument's value, not as "
                                   f"a request for help (invoke -h {argv[0]} shows the task's help)")
