"""Onboarding's steps, each policy alone on a context (no node contacted), and the sequence
with the steps replaced (what a stop skips, the exit code)."""

import dataclasses
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from sparkrack.core.errors import SparkrackError
from sparkrack.facts.onboard import NetdevFacts
from sparkrack.fleet.results import FleetResult, NodeResult
from sparkrack.inventory import load_inventory
from sparkrack.onboard import (
    applyroles,
    baseline,
    join,
    outcomes,
    run,
    scratch,
    stage,
    trust,
    verify,
)
from sparkrack.onboard.context import Context, OnboardReport, Options, Stop
from sparkrack.oplock import audit
from sparkrack.oplock.audit import verify_chain
from sparkrack.oplock.remote import LOCK_DIR

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = load_inventory(REPO / "inventory" / "rehearsal")


def context(tmp_path, *, check=False, replace=None, events=None, **options) -> Context:
    """A context as scratch.build leaves it, without a fleet: spark-09 as a spare (or in
    replace's place), the rehearsal rack's nodes as the members."""
    new = dataclasses.replace(REHEARSAL.nodes[-1], name="spark-09", address="10.77.1.19",
                              roce_addr="10.77.1.19", rank=-1)
    old = REHEARSAL.node(replace) if replace else None
    ctx = Context(REHEARSAL, OnboardReport("spark-09", "10.77.1.19", replace, check),
                  Options(**options),
                  (lambda kind, step, text: events.append((kind, step.name, text)))
                  if events is not None else (lambda kind, step, text: None),
                  tmp_path, old=old)
    ctx.work, ctx.new = REHEARSAL, new
    ctx.members = tuple(n for n in REHEARSAL.nodes if n.name != replace)
    return ctx


def stopped(call, ctx, *args):
    with pytest.raises(Stop):
        call(ctx, *args)


# --- the sequence -----------------------------------------------------------------------


def test_the_sequence_runs_the_steps_in_order_and_a_stop_skips_the_rest(monkeypatch):
    calls = []
    monkeypatch.setattr(scratch, "build", lambda ctx: calls.append("build"))
    for module, name in ((trust, "run"), (applyroles, "confirm"), (applyroles, "run"),
                         (stage, "run"), (verify, "run"), (join, "run")):
        label = f"{module.__name__.rsplit('.', 1)[1]}.{name}"
        monkeypatch.setattr(module, name, lambda ctx, label=label: calls.append(label))

    def refuse(ctx):
        calls.append("baseline.run")
        with ctx.step("baseline") as step:
            ctx.stop(step, "refused", "refused: mtu")

    monkeypatch.setattr(baseline, "run", refuse)
    report = run.onboard(REHEARSAL, "spark-09", "10.77.1.19")
    assert calls == ["build", "trust.run", "baseline.run"]
    assert [s.verdict for s in report.steps] == [  # trust was replaced: it set nothing
        "skipped", "refused", "skipped", "skipped", "skipped", "skipped"]
    assert report.exit_code == 1

    calls.clear()
    monkeypatch.setattr(baseline, "run", lambda ctx: calls.append("baseline.run"))
    report = run.onboard(REHEARSAL, "spark-09", "10.77.1.19")
    assert calls == ["build", "trust.run", "baseline.run", "applyroles.confirm", "build",
                     "applyroles.run", "stage.run", "verify.run", "join.run"]
    assert report.exit_code == 0


def test_a_sparkrack_error_in_a_step_fails_it_with_its_line_and_stops(tmp_path):
    events = []
    ctx = context(tmp_path, events=events)
    with pytest.raises(Stop):
        with ctx.step("stage"):
            raise SparkrackError("no peer answered", fix="check the members")
    step = ctx.report.step("stage")
    assert step.verdict == "failed" and "no peer answered" in step.summary
    assert [e[0] for e in events] == ["start", "end"]


# --- trust ------------------------------------------------------------------------------


def _decision():
    return trust.Decision(trust.NEW, "spark-09: ssh-ed25519 SHA256:abc (not recorded yet)")


class _Key:
    def get_name(self):
        return "ssh-ed25519"


def test_trust_needs_a_matching_fingerprint_or_the_operator(tmp_path):
    ctx = context(tmp_path, fingerprint="SHA256:other")
    ctx.report.fingerprint = "SHA256:abc"
    stopped(trust.confirm_key, ctx, ctx.report.step("trust"), _Key(), _decision())
    assert "does not match the key spark-09 offers" in ctx.report.step("trust").summary

    ctx = context(tmp_path, fingerprint="abc")
    ctx.report.fingerprint = "SHA256:abc"
    trust.confirm_key(ctx, ctx.report.step("trust"), _Key(), _decision())
    assert ctx.report.step("trust").details == ["--fingerprint matches SHA256:abc"]

    ctx = context(tmp_path)
    stopped(trust.confirm_key, ctx, ctx.report.step("trust"), _Key(), _decision())
    assert "not confirmed (non-interactive)" in ctx.report.step("trust").summary

    ctx = context(tmp_path, check=True)
    trust.confirm_key(ctx, ctx.report.step("trust"), _Key(), _decision())
    assert ctx.report.step("trust").details[0].startswith("UNCONFIRMED")

    asked = []
    ctx = context(tmp_path, confirm=lambda q: asked.append(q) or False)
    stopped(trust.confirm_key, ctx, ctx.report.step("trust"), _Key(), _decision())
    assert asked and ctx.report.step("trust").summary == "host key not confirmed by the operator"


# --- baseline: the new node's fabric address ------------------------------------------


def test_roce_addr_is_given_or_the_management_address_or_found_on_the_socket_netdev(tmp_path):
    facts = outcomes.Facts("spark-09", netdevs={
        "enp1s0f0np0": NetdevFacts(9000, "up", "192.168.50.19/24")})
    ctx = context(tmp_path)
    ctx.members = tuple(dataclasses.replace(m, roce_addr=m.address) for m in ctx.members)
    baseline.resolve_roce_addr(ctx, ctx.report.step("baseline"), facts)
    assert ctx.report.roce_addr == "10.77.1.19"  # the members have no separate one

    ctx = context(tmp_path)  # the rehearsal rack's members: a fabric of their own
    baseline.resolve_roce_addr(ctx, ctx.report.step("baseline"), facts)
    assert ctx.roce_addr == ctx.report.roce_addr == "192.168.50.19"
    assert ctx.report.step("baseline").details == [
        "roce_addr 192.168.50.19 (the IPv4 address of enp1s0f0np0)"]

    ctx.roce_addr = None
    stopped(baseline.resolve_roce_addr, ctx, ctx.report.step("baseline"),
            outcomes.Facts("spark-09"))
    assert ctx.report.step("baseline").summary.endswith("has no IPv4 address: pass --roce-addr")


def test_roce_twin_addr_is_given_or_none_or_found_on_the_twin_netdev(tmp_path):
    """The twin (the port's second PCIe path) needs its own address for its RoCE GID."""
    facts = outcomes.Facts("spark-09", netdevs={
        "enp1s0f0np0": NetdevFacts(1500, "up", "10.77.3.19/24"),
        "enP2p1s0f0np0": NetdevFacts(1500, "up", "10.77.4.19/24")})
    ctx = context(tmp_path)
    ctx.members = tuple(dataclasses.replace(m, roce_twin_addr=None) for m in ctx.members)
    baseline.resolve_roce_twin_addr(ctx, ctx.report.step("baseline"), facts)
    assert ctx.report.roce_twin_addr is None  # the members have none

    ctx = context(tmp_path)  # the rehearsal rack's members: twins with addresses
    baseline.resolve_roce_twin_addr(ctx, ctx.report.step("baseline"), facts)
    assert ctx.roce_twin_addr == ctx.report.roce_twin_addr == "10.77.4.19"
    assert ctx.report.step("baseline").details == [
        "roce_twin_addr 10.77.4.19 (the IPv4 address of enP2p1s0f0np0)"]

    ctx = context(tmp_path)  # its twin HCA missing (a waived difference): no address
    baseline.resolve_roce_twin_addr(ctx, ctx.report.step("baseline"), outcomes.Facts("spark-09"))
    assert ctx.roce_twin_addr is None and ctx.report.step("baseline").details == [
        "no roce_twin_addr: enP2p1s0f0np0 absent on spark-09"]

    ctx = context(tmp_path)
    stopped(baseline.resolve_roce_twin_addr, ctx, ctx.report.step("baseline"),
            outcomes.Facts("spark-09", netdevs={"enP2p1s0f0np0": NetdevFacts(1500, "up", "")}))
    assert ctx.report.step("baseline").summary == (
        "the members have a roce_twin_addr, and spark-09 has no IPv4 address on "
        "enP2p1s0f0np0: pass --roce-twin-addr")


# --- provision: the go-ahead ------------------------------------------------------------


def test_the_node_is_changed_only_with_the_operators_go_ahead(tmp_path):
    applyroles.confirm(context(tmp_path, check=True))
    applyroles.confirm(context(tmp_path, assume_yes=True))
    ctx = context(tmp_path)
    stopped(applyroles.confirm, ctx)
    assert ctx.report.step("provision").verdict == "refused"
    assert "pass --yes" in ctx.report.step("provision").summary
    asked = []
    ctx = context(tmp_path, replace="spark-05", confirm=lambda q: asked.append(q) or False)
    stopped(applyroles.confirm, ctx)
    assert asked == ["Provision spark-09, stage images and weights on it, verify it and "
                     "replace spark-05 (rank 4)?"]
    assert ctx.report.step("provision").summary == "not confirmed by the operator"


# --- stage: where the data comes from ---------------------------------------------------


def test_peers_are_the_given_one_then_from_the_last_rank_the_head_last(tmp_path):
    ctx = context(tmp_path)
    names = [n.name for n in REHEARSAL.nodes]
    assert stage.peers(ctx) == names[:0:-1] + [names[0]]
    ctx = context(tmp_path, peer=names[3])
    assert stage.peers(ctx)[:2] == [names[3], names[-1]] and names[0] == stage.peers(ctx)[-1]


# --- verify: a check says what it would probe --------------------------------------------


def test_verify_in_a_check_names_the_ports_and_the_burn(tmp_path):
    events = []
    ctx = context(tmp_path, check=True, events=events, burn_seconds=2.0)
    verify.run(ctx)
    step = ctx.report.step("verify")
    assert step.verdict == "would" and step.summary.startswith("would probe ports 8000 (")
    assert step.summary.endswith(f"between spark-09 and {len(REHEARSAL.nodes)} members both "
                                 "ways, and burn spark-09's GPU for 2 s")
    assert [e[0] for e in events] == ["start", "end"]


# --- join: what comes next ----------------------------------------------------------------


def test_next_steps_name_the_rank_or_the_spare_and_a_check_says_so(tmp_path):
    member = outcomes.JoinPlan("", "", rank=4)
    spare = outcomes.JoinPlan("", "")
    assert join.next_steps(context(tmp_path, replace="spark-05"), member).startswith(
        "spark-09 takes rank 4 (was spark-05). The running engine was not touched")
    assert "`invoke onboard spark-09 --address 10.77.1.19 --replace NODE`" in \
        join.next_steps(context(tmp_path), spare)
    assert join.next_steps(context(tmp_path, check=True), spare).startswith(
        "Check only. After a real run: spark-09 is a spare")


def test_after_a_head_swap_the_next_steps_name_the_watchdogs_reinstall(tmp_path, monkeypatch):
    from sparkrack.inventory.watchdog_record import WatchdogKey

    member = outcomes.JoinPlan("", "", rank=0)
    # none recorded (the rehearsal inventory's own record is the rack tests' to write)
    monkeypatch.setattr(join, "read_record", lambda path: None)
    said = join.next_steps(context(tmp_path, replace="spark-01"), member)
    assert "spark-09 is the head now: the rack lock, the audit log and the deployment " \
        "records are on it" in said and "watchdog" not in said
    for node, want in (("spark-08", "The watchdog service on spark-08 still reads the old "
                        "head: `invoke watch.install` gives it this inventory."),
                       ("spark-01", "The watchdog service ran on spark-01: install it on a "
                        "member (`invoke watch.install --on NODE`).")):
        monkeypatch.setattr(join, "read_record", lambda path, node=node: WatchdogKey(
            node, "/opt/sparkrack-watchdog", "ssh-ed25519 AAAA"))
        assert join.next_steps(context(tmp_path, replace="spark-01"), member).endswith(want)
    assert "watchdog" not in join.next_steps(context(tmp_path, replace="spark-05"), member)


def test_a_lost_heads_state_comes_from_this_machines_copies_of_this_rack_only(
        tmp_path, monkeypatch):
    import json

    from sparkrack.deployments import record
    from sparkrack.onboard import headmove
    from sparkrack.oplock import audit

    class LostHead:
        def __init__(self, inventory, nodes):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def unreachable(fleet, inventory):
        raise SparkrackError("could not read the deployment records on spark-01: timed out")

    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(headmove, "Fleet", LostHead)
    monkeypatch.setattr(record, "read", unreachable)
    mine = {"id": "a", "phase": "start", "task": "up", "rack": "rehearsal"}
    other = {"id": "b", "phase": "start", "task": "up", "rack": "lab"}
    audit.append_local(*(json.dumps(r) for r in (mine, other, {"id": "a", "phase": "end"},
                                                 {"id": "b", "phase": "end"})))
    good = record.Deployment("sglang", "512k", "d1", "h", "img", "sha256:x")
    record._mirror(REHEARSAL, "last-good", json.dumps(dataclasses.asdict(good)).encode())
    source = headmove.gather(context(tmp_path, replace="spark-01"))
    assert source.where.startswith("this machine's copies (")
    assert [(r["id"], r["phase"]) for r in source.lines] == [("a", "start"), ("a", "end")]
    assert source.records == {"current": None, "last-good": good, "failed": None}
    assert headmove.replaces_head(context(tmp_path, replace="spark-01"))
    assert not headmove.replaces_head(context(tmp_path, replace="spark-05"))


class _NewHead:
    """The new head's /var/lib/sparkrack as a directory here: its commands (the lock script's
    append included) run on this machine with that directory in place of the node's."""

    def __init__(self, directory: Path):
        self.directory = directory

    def _here(self, path: str) -> str:
        return path.replace(LOCK_DIR, str(self.directory))

    def run(self, commands, *, timeout=None, stdin=None):
        results = []
        for node, argv in commands.items():
            done = subprocess.run([self._here(a) for a in argv], input=stdin,
                                  capture_output=True, timeout=30)
            results.append(NodeResult(node, "ok" if done.returncode == 0 else "failed",
                                      done.returncode, done.stdout.decode(),
                                      done.stderr.decode()))
        return FleetResult(tuple(results))

    def put(self, node_files, *, timeout=None):
        for files in node_files.values():
            for data, path, mode in files:
                Path(self._here(path)).write_bytes(data)
                Path(self._here(path)).chmod(mode)
        return FleetResult(tuple(NodeResult(node, "ok") for node in node_files))


def _moving(tmp_path, monkeypatch, old_log: str):
    """move()'s ctx and source for spark-01 replaced by spark-09, the old head's log read
    from it; the records and break-glass folds left out (their own tests)."""
    from sparkrack.onboard import headmove

    monkeypatch.setattr(headmove, "_records", lambda ctx, records: [])
    monkeypatch.setattr(headmove, "fold_records", lambda fleet, head, logged: (0, []))
    ctx = context(tmp_path, replace="spark-01")
    ctx.fleet = _NewHead(tmp_path / "spark-09")
    ctx.fleet.directory.mkdir()
    source = headmove.Source("spark-01", audit.parse_lines(old_log), {}, old_log, True)
    return ctx, source, ctx.fleet.directory / "audit.jsonl"


def _old_log(*ids: str) -> list[str]:
    lines, previous = [], ""
    for ident in ids:
        previous = audit.chain(previous, json.dumps({"id": ident, "phase": "end", "task": "up"}))
        lines.append(previous)
    return lines


def test_a_head_move_ties_the_new_chain_to_the_verified_old_one(tmp_path, monkeypatch):
    """Issue 46 item 13: the old log is verified, and the first new record carries its tip."""
    from sparkrack.onboard import headmove

    old = "\n".join(_old_log("a", "b", "c")) + "\n"
    ctx, source, log = _moving(tmp_path, monkeypatch, old)
    said = list(headmove.move(ctx, source))
    assert said[1] == "audit log (spark-01): the chain holds: 3 line(s) verified"
    assert verify_chain(log.read_text()).ok
    records = audit.parse_lines(log.read_text())
    assert [r["id"] for r in records[1:]] == ["a", "b", "c"]
    moved = records[0]
    assert (moved["task"], moved["outcome"]) == ("head-move", "ok")
    assert moved["changed"]["old_chain_tip"] == hashlib.sha256(
        old.splitlines()[-1].encode()).hexdigest() == audit.chain_tip(old)
    assert moved["changed"]["lines_moved"] == 3


def test_a_head_move_never_chains_a_log_that_does_not_verify(tmp_path, monkeypatch):
    """Issue 46 item 13: a log broken at line 3 used to come out of the move verified."""
    from sparkrack.onboard import headmove

    lines = _old_log("a", "b", "c", "d")
    lines[1] = lines[1].replace('"b"', '"B"')
    old = "\n".join(lines) + "\n"
    ctx, source, log = _moving(tmp_path, monkeypatch, old)
    said = []
    with pytest.raises(SparkrackError) as failed:
        for line in headmove.move(ctx, source):
            said.append(line)
    assert failed.value.line() == (
        "spark-01's audit log does not verify, so none of it was chained into spark-09's: "
        "audit log (spark-01): line 3 does not follow line 2: one of them was edited, or "
        "lines were removed or inserted between them (kept whole as "
        "/var/lib/sparkrack/audit.from-spark-01.jsonl on spark-09; spark-09's log says so in "
        "its head-move record; compare with the operators' local copies (invoke log --local "
        "--verify))")
    kept = ctx.fleet.directory / "audit.from-spark-01.jsonl"
    assert kept.read_text() == old and kept.stat().st_mode & 0o777 == 0o600
    records = audit.parse_lines(log.read_text())
    assert [r["task"] for r in records] == ["head-move"]  # nothing of the old log
    assert records[0]["outcome"] == "failed" and "line 3 does not follow" in records[0]["error"]
    assert records[0]["changed"]["old_chain_tip"] == audit.chain_tip(old)
    assert said[1].startswith("audit log (spark-01): line 3 does not follow line 2")
