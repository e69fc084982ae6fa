"""The module registry: the one place a role task's module is looked up (no network)."""

import ast
import importlib
from dataclasses import replace
from pathlib import Path

import pytest

from sparkrack.facts.files import file_query
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.provision import modules
from sparkrack.provision.changes import Run
from sparkrack.provision.modules import REGISTRY, Module
from sparkrack.provision.modules.params import Param
from sparkrack.provision.plan import plan_node, queries
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roles import load_role, load_roles, render_tasks
from sparkrack.provision.roletasks import RoleError

PROVISION = Path(modules.__file__).resolve().parent.parent
GENERIC = ("roles.py", "plan.py", "apply.py", "runner.py", "report.py")  # no module named
SHARED = {"__init__.py", "base.py", "fileops.py", "params.py"}  # modules/ files, not modules


def test_every_shipped_task_resolves_through_the_registry():
    used = {t.module for role in load_roles() for t in (*role.tasks, *role.handlers)}
    assert used and used <= set(REGISTRY)


def test_each_module_is_one_registered_file_of_its_name():
    files = {p.stem.rstrip("_") for p in (PROVISION / "modules").glob("*.py")
             if p.name not in SHARED}
    assert files == set(REGISTRY)
    for name, module in REGISTRY.items():
        assert module.name == name
        stem = name if (PROVISION / "modules" / f"{name}.py").exists() else f"{name}_"
        assert importlib.import_module(f"sparkrack.provision.modules.{stem}").MODULE is module


def test_the_generic_machinery_names_no_module():
    for file in GENERIC:
        tree = ast.parse((PROVISION / file).read_text())
        named = {node.value for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in REGISTRY}
        assert not named, f"{file} names {named}: look it up in the registry instead"


def write(tmp_path, text):
    (tmp_path / "r" / "tasks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "r" / "tasks" / "main.yml").write_text(text)
    return tmp_path / "r"


def test_an_unknown_module_is_one_line_naming_the_role_file_and_task(tmp_path):
    role = write(tmp_path, "- name: fetch it\n  fetch: {src: a, dest: /b}\n")
    with pytest.raises(RoleError) as caught:
        load_role(role)
    line = caught.value.line()
    assert "\n" not in line
    assert line == (f"{role}/tasks/main.yml:2: unknown key 'fetch' (modules: "
                    f"{', '.join(REGISTRY)}; task keys: loop, name, notify, when)")


def test_a_registered_module_is_checked_gathered_and_planned(tmp_path, monkeypatch):
    def plan(step):
        if step.facts.file(str(step.params["path"])).exists:
            return replace(step.base, summary="there")
        return replace(step.base, status="changed", summary="touch",
                       actions=(Run(("touch", "--", str(step.params["path"]))),))

    touch = Module(name="touch", params={"path": Param("str", "what to touch", "/a",
                                                       required=True)},
                   plan=plan, queries=lambda p: [file_query(str(p["path"]))])
    monkeypatch.setitem(REGISTRY, "touch", touch)
    with pytest.raises(RoleError, match="touch: unknown parameter 'mode'"):
        load_role(write(tmp_path, "- name: t\n  touch: {path: /a, mode: '0644'}\n"))
    role = load_role(write(tmp_path, "- name: t\n  touch: {path: '/{{ x }}'}\n"))
    renderer = Renderer()
    tasks = render_tasks(role, role.tasks, {"x": "a"}, renderer)
    assert queries(tasks) == [file_query("/a")]
    change, = plan_node([role], {"r": tasks}, {}, {"x": "a"}, ProvisionFacts(), renderer=renderer)
    assert (change.module, change.status, change.actions) == (
        "touch", "changed", (Run(("touch", "--", "/a")),))


def _settling_command(tmp_path, settle):
    """A command whose effect lands 0.5 s after it returns, planned with settle."""
    flag = tmp_path / "flag"
    role = load_role(write(tmp_path, (
        "- name: late\n  command:\n"
        f"    argv: [sh, -c, '(sleep 0.5; touch {flag}) >/dev/null 2>&1 &']\n"
        f"    unless: [test, -e, '{flag}']\n    settle: {settle}\n")))
    renderer = Renderer()
    tasks = render_tasks(role, role.tasks, {}, renderer)
    guard = ("test", "-e", str(flag))
    change, = plan_node([role], {"r": tasks}, {}, {}, ProvisionFacts(guards={guard: 1}),
                        renderer=renderer)
    return change, flag


def _run_locally(change):
    import subprocess

    from sparkrack.provision.apply import sequence_argv

    return subprocess.run(sequence_argv([a.argv for a in change.actions]),
                          capture_output=True, text=True, timeout=30)


def test_a_settling_command_waits_for_its_guard_and_fails_when_it_never_holds(tmp_path):
    """`netplan apply` returns before the addresses are set: with settle, the apply waits
    for the guard; a guard that never holds fails the command, saying so."""
    change, flag = _settling_command(tmp_path, 5)
    assert [a.describe() for a in change.actions][1] == "wait up to 5 s for the guard to hold"
    done = _run_locally(change)
    assert done.returncode == 0 and flag.exists(), done.stdout
    flag.unlink()

    change, flag = _settling_command(tmp_path, 1)
    never = replace(change, actions=(Run(("true",)), change.actions[1]))
    done = _run_locally(never)
    assert done.returncode == 1 and "still not in force after the wait" in done.stdout
    assert not flag.exists()


def test_settle_needs_an_unless_guard_and_a_sane_number(tmp_path):
    with pytest.raises(RoleError, match="settle waits for the unless guard"):
        load_role(write(tmp_path, "- name: t\n  command: {argv: [a], creates: /b, settle: 5}\n"))
    with pytest.raises(RoleError, match="settle: 0 is outside 0..300 s, 0 excluded"):
        load_role(write(tmp_path, "- name: t\n  command: {argv: [a], unless: [b], settle: 0}\n"))


def test_always_needs_an_unless_guard_that_says_whether_it_was_gone(tmp_path):
    with pytest.raises(RoleError, match="always runs the command on every apply"):
        load_role(write(tmp_path, "- name: t\n  command: {argv: [a], creates: /b, always: true}\n"))
    with pytest.raises(RoleError, match="always: expected true or false, got 1"):
        load_role(write(tmp_path, "- name: t\n  command: {argv: [a], unless: [b], always: 1}\n"))


def test_a_settling_command_waits_until_its_guard_still_holds_a_second_later(tmp_path):
    """networkd deletes and re-adds an address after `netplan apply` returns: the guard
    passes on the old state, then fails for a moment. The wait ends on the new state."""
    flag, back = tmp_path / "flag", tmp_path / "back"
    role = load_role(write(tmp_path, (
        "- name: late\n  command:\n"
        f"    argv: [sh, -c, '(touch {flag}; sleep 0.2; rm {flag}; sleep 0.3; touch {flag} "
        f"{back}) >/dev/null 2>&1 &']\n"
        f"    unless: [test, -e, '{flag}']\n    settle: 10\n")))
    renderer = Renderer()
    tasks = render_tasks(role, role.tasks, {}, renderer)
    change, = plan_node([role], {"r": tasks}, {}, {}, ProvisionFacts(
        guards={("test", "-e", str(flag)): 1}), renderer=renderer)
    done = _run_locally(change)
    assert done.returncode == 0, done.stdout
    assert back.exists(), "the wait ended on the guard's first pass, before the dip"
