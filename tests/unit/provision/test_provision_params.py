"""Module parameters, declared once per module and checked when the roles load: each kind of
mistake is one line naming the role file and line, the parameter and what it may be; a
templated value is checked once rendered; `provision` refuses before it contacts anything
(no network)."""

import re
import shutil
from pathlib import Path

import pytest
from invoke import Context
from invoke.exceptions import Exit

from sparkrack.facts.provision import ProvisionFacts
from sparkrack.provision.modules import REGISTRY
from sparkrack.provision.plan import plan_node
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roles import ROLES_DIR, load_role, render_tasks
from sparkrack.provision.roletasks import RoleError

REPO = Path(__file__).resolve().parents[3]


def role_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "r" / "tasks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "r" / "tasks" / "main.yml").write_text(text)
    return tmp_path / "r"


def refusal(tmp_path: Path, text: str) -> str:
    """The one line load_role refuses text with."""
    role = role_file(tmp_path, text)
    with pytest.raises(RoleError) as refused:
        load_role(role)
    line = refused.value.line()
    assert "\n" not in line and refused.value.exit_code == 2
    # at most 200 characters, the file named as from a checkout (issue 57's bound)
    assert len(line.replace(str(tmp_path), "roles")) <= 200, line
    return line.replace(f"{role}/tasks/main.yml", "main.yml")


UNIT = "- name: x running\n  systemd:\n    name: x.service\n"


def test_an_unknown_parameter_names_its_line_and_the_modules_parameters(tmp_path):
    assert refusal(tmp_path, UNIT + "    enable: true\n") == (
        "main.yml:4: systemd: unknown parameter 'enable' (did you mean "
        "'enabled'?) (systemd's parameters: enabled, name, state, systemctl)")


def test_a_value_of_the_wrong_type_names_its_line_and_what_it_may_be(tmp_path):
    assert refusal(tmp_path, UNIT + "    enabled: 'yes'\n") == (
        "main.yml:4: systemd: enabled: expected true or false, got 'yes' "
        "(e.g. enabled: true)")
    assert refusal(tmp_path, "- name: d\n  file: {path: /d, mode: 0755}\n") == (
        "main.yml:2: file: mode: expected an octal mode in quotes ('0644'; "
        "unquoted, YAML reads a number), got 493 (e.g. mode: '0755')")


def test_a_bad_state_is_refused_at_load_not_per_node_at_plan(tmp_path):
    assert refusal(tmp_path, UNIT + "    enabled: true\n    state: begun\n") == (
        "main.yml:5: systemd: state: expected one of: started, stopped, "
        "restarted, got 'begun' (e.g. state: started)")
    assert refusal(tmp_path, "- name: d\n  file:\n    path: /d\n    state: directroy\n") == (
        "main.yml:4: file: state: expected one of: directory, file, absent, got "
        "'directroy' (did you mean 'directory'?) (e.g. state: directory)")


def test_a_missing_parameter_names_the_modules_line_and_what_to_add(tmp_path):
    assert refusal(tmp_path, "- name: t\n  when: x\n  template:\n    src: a.j2\n") == (
        "main.yml:3: template: missing dest (the path of the file to write, on "
        "the node) (e.g. dest: /etc/sparkrack/example.conf)")


def test_a_number_outside_its_range_names_the_range(tmp_path):
    command = "- name: c\n  command:\n    argv: [a]\n    unless: [b]\n    settle: {}\n"
    assert refusal(tmp_path, command.format(0)) == (
        "main.yml:5: command: settle: 0 is outside 0..300 s, 0 excluded: a wait is "
        "longer than 0 (e.g. settle: 20)")
    assert refusal(tmp_path, command.format(301)).startswith(
        "main.yml:5: command: settle: 301 is outside 0..300 s, 0 excluded")
    assert refusal(tmp_path, command.format("true")) == (
        "main.yml:5: command: settle: expected a number in 0..300 s, 0 excluded, "
        "got true (e.g. settle: 20)")


def test_a_mapping_parameter_checks_its_own_keys(tmp_path):
    text = "- name: a\n  assert:\n    that: 'true'\n    gather:\n      netdev: true\n"
    assert refusal(tmp_path, text) == (
        "main.yml:5: assert: gather: unknown parameter 'netdev' (did you mean "
        "'netdevs'?) (gather's parameters: functions, images, netdevs, paths, renderer, roce)")
    assert refusal(tmp_path, "- name: c\n  command: {argv: a, creates: /b}\n") == (
        "main.yml:2: command: argv: expected a list of strings, got 'a' "
        "(e.g. argv: [systemctl, daemon-reload])")


def test_defaults_are_filled_at_load_where_the_declaration_has_one(tmp_path):
    role = load_role(role_file(tmp_path, "- name: d\n  file: {path: /d}\n"
                               "- name: u\n  systemd: {name: u.service}\n"))
    assert [dict(t.params) for t in role.tasks] == [
        {"path": "/d", "state": "directory", "owner": "root", "group": "root"},
        {"name": "u.service", "systemctl": "systemctl"}]


def plan_one(role, context):
    renderer = Renderer()
    tasks = render_tasks(role, role.tasks, context, renderer)
    return plan_node([role], {role.name: tasks}, {}, context, ProvisionFacts(),
                     renderer=renderer)


def test_a_templated_value_is_checked_once_rendered_as_the_nodes_task_error(tmp_path):
    """A value from a template depends on the node's vars: it is checked when rendered,
    and a wrong one fails that node's task in one line, naming what it was rendered from."""
    role = load_role(role_file(tmp_path, UNIT + "    state: '{{ wanted }}'\n"))
    change, = plan_one(role, {"wanted": "begun"})
    assert (change.status, change.summary, change.actions) == ("failed", (
        "state: expected one of: started, stopped, restarted, got 'begun' (rendered from "
        "'{{ wanted }}')"), ())
    change, = plan_one(role, {"wanted": "started"})
    assert change.status == "changed" and change.summary == "x.service: start"


def test_every_shipped_role_renders_values_its_modules_accept():
    """Every value the shipped roles template, rendered for every node of the rehearsal
    inventory (the watchdog's play with the vars watch.install gives it), is one its
    module's declaration accepts."""
    from sparkrack.facts.watchdog import NodeState
    from sparkrack.inventory import load_inventory
    from sparkrack.provision.roles import load_roles, node_vars
    from sparkrack.watchdog.install import role_vars
    from sparkrack.watchdog.settings import Settings

    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    plays = {"site.yml": {}, "watchdog.yml": role_vars(inventory, Settings(), NodeState())}
    renderer = Renderer()
    rendered = 0
    for play, extra in plays.items():
        roles = load_roles(search=(ROLES_DIR,), play=play)
        for node in inventory.nodes:
            context = node_vars(inventory, node, roles, {"HF_TOKEN": "hf_x"}, extra)
            for role in roles:
                for task in render_tasks(role, (*role.tasks, *role.handlers), context,
                                         renderer):
                    assert task.error is None, (node.name, task.name, task.error)
                    rendered += 1
    assert rendered > 300


def test_the_declarations_are_whole():
    """Every parameter says what it is; a choice's example is one of its choices; a number
    has a range with its source; a default fits its own declaration."""
    for module in REGISTRY.values():
        for name, param in module.params.items():
            assert param.about and param.example is not None, (module.name, name)
            assert param.problem(name, param.example) is None, (module.name, name)
            if param.default is not None:
                assert param.problem(name, param.default) is None, (module.name, name)
            if param.type == "number":
                assert param.range is not None and param.range.source, (module.name, name)


def bad_clock_cap(inventory: Path) -> tuple[Path, int]:
    """An inventory's own clock_cap role whose systemd task says `state: begun`: the file
    and the line of that state."""
    role = inventory / ".sparkrack" / "roles" / "clock_cap"
    shutil.copytree(ROLES_DIR / "clock_cap", role)
    tasks = role / "tasks" / "main.yml"
    text = tasks.read_text()
    assert text.count("state: started") == 1
    tasks.write_text(text.replace("state: started", "state: begun"))
    line = tasks.read_text().splitlines().index("    state: begun") + 1
    return tasks, line


def test_provision_refuses_a_bad_role_before_it_takes_the_lock_or_contacts_a_node(
        tmp_path, monkeypatch):
    from sparkrack.cli import provision_tasks
    from sparkrack.oplock import guard
    from sparkrack.provision import runner

    inventory = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inventory)
    tasks, line = bad_clock_cap(inventory)
    contacted = []

    class Refused:
        def __init__(self, *args, **kwargs):
            contacted.append(type(self).__name__)
            raise AssertionError("contacted the rack")

    monkeypatch.setattr(guard, "Guard", Refused)
    monkeypatch.setattr(runner, "Fleet", Refused)
    for check in (False, True):
        with pytest.raises(Exit) as refused:
            provision_tasks.provision(Context(), inventory=str(inventory), check=check)
        assert refused.value.code == 2
        assert refused.value.message == (
            f"error: {tasks}:{line}: "
            "systemd: state: expected one of: started, stopped, restarted, got 'begun' "
            "(e.g. state: started)")
    with pytest.raises(Exit) as refused:
        provision_tasks.unprovision(Context(), inventory=str(inventory))
    assert refused.value.code == 2 and f"{tasks}:{line}:" in refused.value.message
    assert contacted == []


def test_the_command_line_says_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    inventory = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inventory)
    tasks, line = bad_clock_cap(inventory)
    done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), "provision",
                           "--check", "-i", str(inventory)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {tasks}:{line}: systemd: "
        "state: expected one of: started, stopped, restarted, got 'begun' (e.g. state: "
        "started)"]
    assert done.stdout == ""


def test_a_shipped_role_file_is_named_as_the_operator_sees_it(monkeypatch, tmp_path):
    """From the checkout's root, a shipped role's line reads roles/<role>/tasks/main.yml:N."""
    from sparkrack.provision import roles

    monkeypatch.chdir(REPO)
    assert roles.shown(ROLES_DIR / "clock_cap" / "tasks" / "main.yml") == (
        "roles/clock_cap/tasks/main.yml")
    monkeypatch.chdir(tmp_path)
    assert re.fullmatch(r"/.+/roles/clock_cap/tasks/main\.yml",
                        roles.shown(ROLES_DIR / "clock_cap" / "tasks" / "main.yml"))


def documented_rows() -> list[str]:
    """The rows of docs/provisioning.md's parameter table, from the declarations."""
    from sparkrack.provision.modules.params import written

    def rows(module: str, declared, prefix: str = "") -> list[str]:
        found = []
        for name, param in declared.items():
            default = f"`{written(param.default)}`" if param.default is not None else ""
            may_be = param.expected() + (", required" if param.required else "")
            found.append(f"| `{module}` | `{prefix}{name}` | {may_be} | {default} | "
                         f"{param.about} |")
            if param.options:
                found += rows(module, param.options, f"{prefix}{name}.")
        return found

    return [row for module in REGISTRY.values() for row in rows(module.name, module.params)]


def test_the_docs_table_is_the_declarations():
    page = (REPO / "docs" / "provisioning.md").read_text()
    section = page.split("\n## Module parameters\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    assert table == documented_rows()
    for module in REGISTRY.values():
        for name, param in module.params.items():
            if param.range is not None:
                assert (f"`{module.name}`'s `{name}`: {param.range.text()}, "
                        f"{param.range.source}") in " ".join(section.split())
