"""The CLI's module boundary (issue 17): `invoke --list` and `invoke -h TASK` import invoke
and the small sparkrack.cli modules only (and the --since grammar, for its help text); a
task imports what it uses when it runs.

Each check runs in a fresh interpreter from the repo root, so the modules seen are the ones
`tasks.py` pulls in, not what other tests imported. No timing here: benchmarks/fastpaths.py.
"""

import builtins
import importlib
import json
import subprocess
import symtable
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("docker", "paramiko", "fabric", "jinja2", "rich", "requests", "urllib3")
# The sparkrack modules building the namespace may import; everything else waits for a task.
LIGHT = {"sparkrack", "sparkrack.core", "sparkrack.core.errors", "sparkrack.core.console",
         "sparkrack.core.since"}

PROBE = """
import json, sys
{body}
print(json.dumps({{"modules": sorted(sys.modules),
                   "files": [sys.modules[m].__file__ for m in ("tasks", "sparkrack")]}}))
"""


def _fresh(body: str) -> tuple[dict, str]:
    """Run `body` in a new interpreter at the repo root; its modules and what it printed."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed, _, last = done.stdout.rstrip("\n").rpartition("\n")
    seen = json.loads(last)
    for path in seen["files"]:  # this checkout's code, not an installed copy
        assert Path(path).resolve().is_relative_to(REPO), path
    return seen, printed


def _assert_light(modules: list[str]) -> None:
    heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
    assert not heavy, f"imported before any task ran: {heavy}"
    ours = {m for m in modules if m.split(".")[0] == "sparkrack"}
    extra = sorted(m for m in ours - LIGHT if not m.startswith("sparkrack.cli"))
    assert not extra, f"sparkrack modules imported before any task ran: {extra}"


def test_importing_tasks_imports_nothing_heavy():
    seen, _ = _fresh("import tasks")
    _assert_light(seen["modules"])


INVOKE_LIST_AND_HELP = ("import tasks\nfrom invoke import Program\n"
                        "for argv in (['--list'], ['-h', 'up'], ['-h', 'provision'], ['-h', 'bench']):\n"
                        "    Program(namespace=tasks.ns).run(['invoke', *argv], exit=False)")
SPARKRACK_LIST = ("import sys, tasks\nfrom sparkrack.cli import main\n"
                  "sys.argv = ['sparkrack', '--list']\n"
                  "try:\n    main()\nexcept SystemExit as done:\n    assert not done.code, done.code")


@pytest.mark.parametrize("body, names", [
    (INVOKE_LIST_AND_HELP, ("up", "provision", "onboard", "bench.compare", "rehearsal.stub-images")),
    (SPARKRACK_LIST, ("up", "provision", "watch.install", "bench.compare", "rehearsal.stub-images")),
], ids=["invoke --list and -h", "the sparkrack command"])
def test_listing_and_help_import_nothing_heavy(body, names):
    seen, printed = _fresh(body)
    _assert_light(seen["modules"])
    for name in names:
        assert f"  {name} " in printed


@pytest.mark.parametrize("name, flags", [
    ("up", ("--engine", "--profile", "--inventory", "--timeout", "--override-power", "--wait")),
    ("provision", ("--inventory", "--limit", "--role", "--check", "--diff", "--json", "--wait")),
    ("rehearsal.stub-model", ("--inventory", "--config", "--limit", "--nodes")),
])
def test_help_from_the_repo_root(name, flags):
    done = subprocess.run([sys.executable, "-m", "invoke", "-h", name], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"[--core-opts] {name} [--options]" in done.stdout
    for flag in flags:
        assert flag in done.stdout


def test_task_modules_name_only_what_they_define():
    """A name a task body uses must exist in its module: moving an import into one body
    must not leave another body without it (only the rack would notice)."""
    for path in sorted((REPO / "sparkrack" / "cli").glob("*.py")) + [
            REPO / "sparkrack" / "core" / "console.py"]:
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve() == path.resolve()
        tables = [symtable.symtable(path.read_text(), str(path), "exec")]
        while tables:
            table = tables.pop()
            tables.extend(table.get_children())
            missing = [s.get_name() for s in table.get_symbols()
                       if s.is_referenced() and s.is_global()
                       and not hasattr(module, s.get_name()) and not hasattr(builtins, s.get_name())]
            assert not missing, f"{path.name}: {table.get_name()} uses undefined {missing}"
