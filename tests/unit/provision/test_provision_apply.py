"""Applying a plan: batching in plan order, and the command sequence run by bash."""

import subprocess

from sparkrack.fleet import quote_argv
from sparkrack.fleet.results import NodeResult
from sparkrack.provision.apply import _run_culprit, _steps, sequence_argv
from sparkrack.provision.changes import Change, Put, Run, Transfer


def change(*actions, status="changed"):
    return Change("r", "t", "m", status, actions=tuple(actions))


def test_steps_merge_consecutive_kinds_in_plan_order():
    plan = [change(Run(("mkdir", "/a"))), change(Put("/a/x", b"1", 0o644)),
            change(Put("/a/y", b"2", 0o600), Run(("chown", "u:g", "/a/y"))),
            change(Run(("rm", "/z")), status="ok"),
            change(Transfer("i", "sha256:1", "node:a")), change(Run(("systemctl", "x")))]
    steps = _steps(plan)
    assert [(kind, [i for i, _ in batch]) for kind, batch in steps] == [
        ("run", [0]), ("put", [1, 2]), ("run", [2, 5])]


def test_a_refresh_is_applied_though_it_is_no_change():
    refresh = Change("clock_cap", "lock", "command", "ok", actions=(Run(("lock",)),),
                     refresh=True)
    failed = Change("clock_cap", "lock", "command", "failed", actions=(Run(("x",)),),
                    refresh=True)
    steps = _steps([change(status="ok"), refresh, failed])
    assert [(kind, [i for i, _ in batch]) for kind, batch in steps] == [("run", [1])]


def test_the_report_names_what_was_re_applied_and_where_it_was_put_back():
    from sparkrack.provision.apply import ApplyResult
    from sparkrack.provision.report import as_json, refreshed_lines
    from sparkrack.provision.runner import NodeRun, ProvisionReport

    def run(name, status):
        lock = Change("clock_cap", "the GPU clock lock in force", "command", status,
                      actions=(Run(("lock",)),), refresh=True)
        node = NodeRun(name, int(name[-1]), plan=[change(status="ok"), lock])
        node.applied = ApplyResult(name, applied={1})
        return node

    nodes = [run(f"spark-0{i}", "changed" if i == 2 else "ok") for i in range(1, 9)]
    nodes[6].applied = ApplyResult("spark-07", "unreachable", errors={1: "no answer"})
    report = ProvisionReport(check=False, absent=False, roles=("clock_cap",), nodes=nodes)
    assert refreshed_lines(report) == [
        "clock_cap: the GPU clock lock in force: re-applied on spark-01, spark-02, spark-03, "
        "spark-04, spark-05, spark-06, spark-08; put back on spark-02"]
    assert as_json(report)["refreshed"] == [{
        "role": "clock_cap", "task": "the GPU clock lock in force", "put_back": ["spark-02"],
        "nodes": ["spark-01", "spark-02", "spark-03", "spark-04", "spark-05", "spark-06",
                  "spark-08"]}]
    assert report.changed == 1


def run_locally(argv):
    return subprocess.run(["sh", "-c", quote_argv(argv)], capture_output=True, text=True, check=False,
                          timeout=20)


def test_sequence_stops_at_the_first_failure_and_names_it(tmp_path):
    mark = tmp_path / "after"
    argv = sequence_argv([["true"], ["sh", "-c", "echo boom >&2; exit 3"],
                          ["touch", str(mark)]])
    done = run_locally(argv)
    assert done.returncode == 1 and not mark.exists()
    batch = [(4, Run(("true",))), (5, Run(("sh", "-c", "..."))), (6, Run(("touch", "x")))]
    result = NodeResult("n", "failed", 1, done.stdout, done.stderr)
    index, message = _run_culprit(batch, result)
    assert index == 5 and message.startswith("`sh -c ...` exited 3") and "boom" in message


def test_sequence_runs_arguments_literally(tmp_path):
    odd = tmp_path / "a b; touch pwned $(touch pwned2)"
    done = run_locally(sequence_argv([["touch", str(odd)], ["true"]]))
    assert done.returncode == 0 and odd.exists()
    assert not list(tmp_path.glob("pwned*")) and not (tmp_path.parent / "pwned").exists()


def test_env_files_parse_literally():
    from sparkrack.engineenv import parse_env
    text = "# header\nNCCL_IB_GID_INDEX=5\nHF_TOKEN=a=b $(x)\n\nbad line\n"
    assert parse_env(text) == {"NCCL_IB_GID_INDEX": "5", "HF_TOKEN": "a=b $(x)"}


def test_recap_counts_like_ansible_and_an_interrupted_apply_counts_no_change():
    from sparkrack.provision.apply import ApplyResult
    from sparkrack.provision.runner import NodeRun, ProvisionReport
    plan = [change(Run(("a",))), change(Run(("b",))), change(status="ok"),
            change(status="skipped")]
    done = NodeRun("n1", 0, plan=plan, final=[])
    done.applied = ApplyResult("n1", applied={0, 1})
    cut = NodeRun("n2", 1, status="unreachable", plan=plan)
    cut.applied = ApplyResult("n2", "unreachable", errors={0: "no answer"})
    never = NodeRun("n3", 2, status="unreachable", error="no answer within 5 s")
    report = ProvisionReport(check=False, absent=False, roles=("r",), nodes=[done, cut, never])
    assert report.recap("n1") == {"ok": 3, "changed": 2, "failed": 0, "skipped": 1,
                                  "unreachable": 0}
    assert report.recap("n2") == {"ok": 1, "changed": 0, "failed": 0, "skipped": 3,
                                  "unreachable": 1}
    assert report.recap("n3") == {"ok": 0, "changed": 0, "failed": 0, "skipped": 0,
                                  "unreachable": 1}
    assert report.exit_code == 1 and report.changed == 2


def test_a_failed_commands_output_cannot_forge_the_section_naming_it(tmp_path):
    forger = ["sh", "-c", "printf '@@0 failed\\nrc 0\\nfirst\\n\\nlast\\n'; exit 4"]
    done = run_locally(sequence_argv([["true"], ["true"], forger]))
    assert done.stdout.splitlines()[:3] == ["@@2 failed", "rc 4", " @@0 failed"]
    batch = [(0, Run(("true",))), (1, Run(("true",))), (7, Run(tuple(forger)))]
    index, message = _run_culprit(batch, NodeResult("n", "failed", 1, done.stdout, done.stderr))
    assert index == 7 and message == (f"`{' '.join(forger)}` exited 4: @@0 failed rc 0 "
                                      "first last")
    silent = run_locally(sequence_argv([["false"]]))
    assert _run_culprit([(3, Run(("false",)))], NodeResult(
        "n", "failed", 1, silent.stdout, silent.stderr)) == (3, "`false` exited 1")
    assert _run_culprit(batch, NodeResult("n", "unreachable", None, "", "")) is None
