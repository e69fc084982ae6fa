"""Plans as data: rendered tasks + facts in, changes and their actions out (no network)."""

import hashlib
from pathlib import Path

import pytest

from sparkrack.facts.files import FileFacts
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.systemd import UnitFacts
from sparkrack.provision.changes import Put, Run, Transfer
from sparkrack.provision.plan import plan_node, queries
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roles import load_role, render_tasks
from sparkrack.transfer.images import ImageTarget


def make_role(tmp_path: Path, tasks: str, handlers: str = "", templates=None, name="r"):
    root = tmp_path / name
    (root / "tasks").mkdir(parents=True)
    (root / "tasks" / "main.yml").write_text(tasks)
    if handlers:
        (root / "handlers").mkdir()
        (root / "handlers" / "main.yml").write_text(handlers)
    (root / "templates").mkdir()
    for file, text in (templates or {}).items():
        (root / "templates" / file).write_text(text)
    return load_role(root)


def plan(roles, facts, context=None, **kwargs):
    renderer = Renderer()
    context = {"rack_name": "test", **(context or {})}
    tasks = {r.name: render_tasks(r, r.tasks, context, renderer) for r in roles}
    handlers = {r.name: render_tasks(r, r.handlers, context, renderer) for r in roles}
    return plan_node(roles, tasks, handlers, context, facts, renderer=renderer, **kwargs)


def file_facts(content: bytes, mode="644", owner="root", group="root") -> FileFacts:
    return FileFacts(exists=True, type="file", mode=mode, owner=owner, group=group,
                     size=len(content), mtime="1.0",
                     sha256=hashlib.sha256(content).hexdigest(), content=content)


UNIT_TASKS = """
- name: unit
  template: {src: u.service.j2, dest: /etc/systemd/system/x.service, mode: "0644"}
  notify: restart x
- name: running
  systemd: {name: x.service, enabled: true, state: started}
- name: ran
  assert:
    that: "facts.units['x.service'].active == 'active'"
    fail_msg: "x is {{ facts.units['x.service'].active }}"
"""
UNIT_HANDLERS = """
- name: restart x
  systemd: {name: x.service, state: restarted}
"""
UNIT_TEXT = "[Service]\nExecStart=/bin/true {{ rack_name }}\n"


@pytest.fixture
def unit_role(tmp_path):
    return make_role(tmp_path, UNIT_TASKS, UNIT_HANDLERS, {"u.service.j2": UNIT_TEXT})


def test_fresh_node_creates_reloads_once_enables_starts(unit_role):
    changes = plan([unit_role], ProvisionFacts())
    assert [(c.task, c.status) for c in changes] == [
        ("unit", "changed"), ("running", "changed"), ("ran", "pending"),
        ("restart x", "ok")]
    put = changes[0].actions[0]
    assert isinstance(put, Put) and put.path == "/etc/systemd/system/x.service"
    assert put.content == b"[Service]\nExecStart=/bin/true test\n" and put.mode == 0o644
    assert changes[1].actions == (Run(("systemctl", "daemon-reload")),
                                  Run(("systemctl", "enable", "x.service")),
                                  Run(("systemctl", "start", "x.service")))
    assert changes[3].summary.endswith("not restarted (started in this run)")
    assert "+ExecStart=/bin/true test" in changes[0].diff


def converged_facts(text=b"[Service]\nExecStart=/bin/true test\n"):
    return ProvisionFacts(files={"/etc/systemd/system/x.service": file_facts(text)},
                     units={"x.service": UnitFacts(load="loaded", active="active",
                                                   sub="exited", result="success",
                                                   enabled="enabled")})


def test_converged_node_plans_nothing(unit_role):
    changes = plan([unit_role], converged_facts())
    assert [c.status for c in changes] == ["ok", "ok", "ok"]
    assert all(not c.actions for c in changes)


def test_changed_unit_reloads_then_handler_restarts_once(unit_role, tmp_path):
    changes = plan([unit_role], converged_facts(b"[Service]\nExecStart=/bin/false\n"))
    assert [(c.task, c.status) for c in changes] == [
        ("unit", "changed"), ("running", "changed"), ("ran", "pending"), ("restart x", "changed")]
    assert changes[1].actions == (Run(("systemctl", "daemon-reload")),)
    assert changes[3].handler and changes[3].actions == (Run(("systemctl", "restart",
                                                              "x.service")),)
    assert "-ExecStart=/bin/false" in changes[0].diff
    assert changes[0].summary.endswith("update (+1 -1)")


def test_failed_assert_fails_with_its_message(unit_role):
    facts = converged_facts()
    facts = ProvisionFacts(files=facts.files, units={"x.service": UnitFacts(
        load="loaded", active="failed", result="exit-code", enabled="enabled")})
    changes = plan([unit_role], facts)
    assert changes[1].actions == (Run(("systemctl", "reset-failed", "x.service")),
                                  Run(("systemctl", "start", "x.service")))
    assert changes[2].status == "pending"  # the start may fix it: the re-plan checks
    facts_after = ProvisionFacts(files=facts.files, units=facts.units)
    only_assert = plan([unit_role], facts_after)
    assert only_assert[2].status == "pending"


def test_assert_fails_when_nothing_before_it_changes(tmp_path):
    role = make_role(tmp_path, """
- name: hca
  assert:
    gather: {roce: [a, b]}
    that: "facts.roce.missing == []"
    fail_msg: "HCA {{ facts.roce.missing | join(', ') }} missing"
- name: after
  file: {path: /etc/x, state: directory}
""")
    from sparkrack.facts.roce import HcaFacts, RoceFacts
    facts = ProvisionFacts(roce=RoceFacts({"a": HcaFacts(present=True), "b": HcaFacts()}))
    changes = plan([role], facts)
    assert changes[0].status == "failed" and changes[0].summary == "HCA b missing"
    assert changes[1].status == "skipped"  # the rest of the role does not run
    assert [q.value for q in queries(render_tasks(role, role.tasks, {}, Renderer()))] == [
        ("a",), ("b",), ("/etc/x",)]


def test_failure_in_one_role_does_not_stop_the_next(tmp_path, unit_role):
    bad = make_role(tmp_path, "- name: never\n  assert: {that: 'false'}\n", name="bad")
    changes = plan([bad, unit_role], converged_facts())
    assert [c.status for c in changes] == ["failed", "ok", "ok", "ok"]


def test_mode_and_owner_fixed_without_rewriting(tmp_path):
    role = make_role(tmp_path, """
- name: env
  template: {src: e.j2, dest: /etc/e.env, mode: "0600", owner: root, group: root}
""", templates={"e.j2": "A=1\n"})
    changes = plan([role], ProvisionFacts(files={"/etc/e.env": file_facts(b"A=1\n", mode="644",
                                                                     group="adm")}))
    assert changes[0].actions == (Run(("chmod", "0600", "--", "/etc/e.env")),
                                  Run(("chown", "root:root", "--", "/etc/e.env")))
    assert not changes[0].diff


def test_new_file_owned_by_another_user_is_chowned(tmp_path):
    role = make_role(tmp_path, """
- name: env
  template: {src: e.j2, dest: /etc/e.env, owner: nobody, group: nogroup}
""", templates={"e.j2": "A=1\n"})
    actions = plan([role], ProvisionFacts())[0].actions
    assert actions[1] == Run(("chown", "nobody:nogroup", "--", "/etc/e.env"))


def test_metacharacters_stay_literal_in_content_and_arguments(tmp_path):
    evil = "x; touch /tmp/pwned $(reboot) `id` \\ 'q' \"d\""
    role = make_role(tmp_path, """
- name: dir
  file: {path: "/etc/{{ rack_name }}", state: directory}
- name: env
  template: {src: e.j2, dest: "/etc/{{ rack_name }}/e.env"}
""", templates={"e.j2": "# {{ rack_name | oneline }}\nV={{ rack_name | envvalue }}\n"})
    changes = plan([role], ProvisionFacts(), {"rack_name": evil})
    assert changes[0].actions == (Run(("mkdir", "-p", "-m", "0755", "--", f"/etc/{evil}")),)
    put = changes[1].actions[0]
    assert put.path == f"/etc/{evil}/e.env"
    assert put.content == f"# {evil}\nV={evil}\n".encode()


def test_line_breaks_in_values_fail_the_task(tmp_path):
    role = make_role(tmp_path, "- name: env\n  template: {src: e.j2, dest: /etc/e.env}\n",
                     templates={"e.j2": "V={{ v | envvalue }}\n"})
    change = plan([role], ProvisionFacts(), {"v": "a\nLD_PRELOAD=/x.so"})[0]
    assert change.status == "failed" and "line break" in change.summary


def test_secrets_never_in_summaries_or_diffs(tmp_path):
    role = make_role(tmp_path, """
- name: env
  template: {src: e.j2, dest: /etc/e.env, mode: "0600", secret_keys: [HF_TOKEN]}
""", templates={"e.j2": "A=1\nHF_TOKEN={{ hf_token }}\n"})
    old = b"A=0\nHF_TOKEN=hf_oldsecretvalue\n"
    changes = plan([role], ProvisionFacts(files={"/etc/e.env": file_facts(old, mode="600")}),
                   {"hf_token": "hf_newsecretvalue"}, secrets=["hf_newsecretvalue"])
    text = changes[0].summary + changes[0].diff + repr(changes[0])
    assert "secretvalue" not in text
    assert "+HF_TOKEN=*** (changed)" in changes[0].diff and "-HF_TOKEN=***" in changes[0].diff
    assert b"hf_newsecretvalue" in changes[0].actions[0].content


def test_every_line_of_a_secret_file_that_could_hold_a_secret_is_masked(tmp_path):
    role = make_role(tmp_path, """
- name: env
  template: {src: e.j2, dest: /etc/e.env, mode: "0600", secret_keys: [HF_TOKEN]}
""", templates={"e.j2": "A=1\n"})
    old = (b"# hand edits\nA=0\n  HF_TOKEN = hf_spaced_secret\nexport HF_TOKEN=hf_exported_secret\n"
           b"HUGGING_FACE_HUB_TOKEN=hf_other_secret\nhf_bare_secret\nMY_API_KEY=k_secret\n")
    change = plan([role], ProvisionFacts(files={"/etc/e.env": file_facts(old, mode="600")}), {})[0]
    assert "secret" not in change.diff.replace("secret file", "")
    assert "-A=0\n" in change.diff and "+A=1\n" in change.diff and "-# hand edits" in change.diff
    assert "-*** (a line that is not KEY=VALUE)" in change.diff
    assert "-export HF_TOKEN=***" in change.diff and "-HUGGING_FACE_HUB_TOKEN=***" in change.diff


def test_a_secret_files_hand_added_passwords_are_masked_like_the_audit_logs(tmp_path):
    """Issue 46 item 14: the names the audit log masks (PASS, PWD, AUTH, KEY) are masked in
    a secret file's diff too."""
    role = make_role(tmp_path, """
- name: env
  template: {src: e.j2, dest: /etc/e.env, mode: "0600", secret_keys: [HF_TOKEN]}
""", templates={"e.j2": "A=1\n"})
    old = (b"PGPASSWORD=s3cret\nMYSQL_PWD=s3cret\nREDISCLI_AUTH=s3cret\nSSH_KEY=s3cret\n"
           b"DB_PASS=s3cret\nA=0\n")
    change = plan([role], ProvisionFacts(files={"/etc/e.env": file_facts(old, mode="600")}), {})[0]
    assert "s3cret" not in change.diff and "-MYSQL_PWD=***" in change.diff


def test_directory_made_by_an_earlier_task_is_not_made_twice(tmp_path):
    role = make_role(tmp_path, """
- name: a
  file: {path: /etc/s, state: directory}
- name: b
  file: {path: /etc/s, state: directory}
""")
    changes = plan([role], ProvisionFacts())
    assert [c.status for c in changes] == ["changed", "ok"]


def test_command_guards(tmp_path):
    role = make_role(tmp_path, """
- name: once
  command: {argv: [touch, /etc/done], creates: /etc/done}
- name: unless
  command: {argv: [modprobe, x], unless: [grep, -q, x, /proc/modules]}
""")
    fresh = plan([role], ProvisionFacts(guards={("grep", "-q", "x", "/proc/modules"): 1}))
    assert [c.actions for c in fresh] == [(Run(("touch", "/etc/done")),),
                                          (Run(("modprobe", "x")),)]
    done = plan([role], ProvisionFacts(files={"/etc/done": file_facts(b"")},
                                  guards={("grep", "-q", "x", "/proc/modules"): 0}))
    assert [c.status for c in done] == ["ok", "ok"]


def test_an_always_command_runs_on_every_apply_and_is_a_change_only_where_gone(tmp_path):
    """Issue 53: a lock no fact shows (the GPU clock's) is re-applied on every run; its guard
    says only whether this run puts it back (a change, with why) or refreshes it."""
    role = make_role(tmp_path, """
- name: lock
  command: {argv: [lock, "2200"], unless: [in-force, "2200"], always: true}
""")
    guard = ("in-force", "2200")
    [held] = plan([role], ProvisionFacts(guards={guard: 0}))
    assert (held.status, held.refresh, held.applies, held.actions) == (
        "ok", True, True, (Run(("lock", "2200")),))
    assert held.summary == "re-applied on every run: lock 2200"
    [gone] = plan([role], ProvisionFacts(guards={guard: 1}, guard_reasons={
        guard: "the lock is gone: the burn at 12:03:04 found 2477 MHz"}))
    assert (gone.status, gone.refresh, gone.actions) == ("changed", True, (Run(("lock", "2200")),))
    assert gone.summary == "run lock 2200 (the lock is gone: the burn at 12:03:04 found 2477 MHz)"
    [away] = plan([role], ProvisionFacts(guards={guard: 0}), absent=True)
    assert (away.status, away.applies) == ("skipped", False)


def test_when_skips(tmp_path):
    role = make_role(tmp_path, """
- name: only sglang
  file: {path: /etc/s, state: directory}
  when: "'sglang' in images"
""")
    assert plan([role], ProvisionFacts(), {"images": {"vllm": "x"}})[0].status == "skipped"
    assert plan([role], ProvisionFacts(), {"images": {"sglang": "x"}})[0].status == "changed"


IMAGE_TASKS = """
- name: "{{ item.0 }}"
  docker_image: {name: "{{ item.1 }}"}
  loop: "{{ images | dictsort }}"
"""


def test_docker_image_present_missing_or_other_id(tmp_path):
    role = make_role(tmp_path, IMAGE_TASKS)
    context = {"images": {"sglang": "s:1", "vllm": "v:1"}}
    targets = {"s:1": ImageTarget("s:1", "sha256:aa", "node:spark-01"),
               "v:1": ImageTarget("v:1", "sha256:bb", "tar:/x.tar")}
    changes = plan([role], ProvisionFacts(images={"s:1": "sha256:aa", "v:1": "sha256:cc"}),
                   context, images=targets)
    assert [c.status for c in changes] == ["ok", "changed"]
    assert changes[1].actions == (Transfer("v:1", "sha256:bb", "tar:/x.tar"),)
    none = plan([role], ProvisionFacts(images=None, images_error="docker down"), context,
                images=targets)
    assert [c.status for c in none] == ["failed", "skipped"]
    assert none[0].summary == "docker did not list images: docker down"
    unresolved = plan([role], ProvisionFacts(images={}), context,
                      images={"s:1": ImageTarget("s:1", None, error="no node has s:1")})
    assert unresolved[0].summary == "s:1: no node has s:1"


def test_docker_image_pinned_id_must_match_the_source(tmp_path):
    role = make_role(tmp_path, "- name: s\n  docker_image: {name: 's:1', id: 'sha256:aa'}\n")
    good = {"s:1": ImageTarget("s:1", "sha256:aa", "node:spark-01")}
    assert plan([role], ProvisionFacts(images={}), images=good)[0].status == "changed"
    other = {"s:1": ImageTarget("s:1", "sha256:bb", "node:spark-01")}
    change = plan([role], ProvisionFacts(images={}), images=other)[0]
    assert change.status == "failed" and "not the pinned aa" in change.summary


def test_absent_mode_walks_back_and_removes(unit_role):
    changes = plan([unit_role], converged_facts(), absent=True)
    assert [(c.task, c.status) for c in changes] == [
        ("ran", "skipped"), ("running", "changed"), ("unit", "changed"),
        ("daemon-reload", "changed"), ("restart x", "ok")]
    assert changes[1].actions == (Run(("systemctl", "stop", "x.service")),
                                  Run(("systemctl", "disable", "x.service")))
    assert changes[2].actions == (Run(("rm", "-f", "--", "/etc/systemd/system/x.service")),)
    assert plan([unit_role], ProvisionFacts(), absent=True)[1].status == "ok"


def test_absent_mode_keeps_directories_with_other_entries(tmp_path):
    role = make_role(tmp_path, """
- name: dir
  file: {path: /etc/s, state: directory}
- name: env
  template: {src: e.j2, dest: /etc/s/a.env}
""", templates={"e.j2": "A=1\n"})
    theirs = ProvisionFacts(files={"/etc/s": FileFacts(exists=True, type="directory",
                                                  entries=("a.env", "theirs")),
                              "/etc/s/a.env": file_facts(b"A=1\n")})
    assert [c.status for c in plan([role], theirs, absent=True)] == ["changed", "ok"]
    ours = ProvisionFacts(files={"/etc/s": FileFacts(exists=True, type="directory",
                                                entries=("a.env",)),
                            "/etc/s/a.env": file_facts(b"A=1\n")})
    changes = plan([role], ours, absent=True)
    assert changes[1].actions == (Run(("rmdir", "--", "/etc/s")),)
