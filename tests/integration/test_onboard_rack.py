"""`invoke onboard` on the rehearsal rack, with extra nodes outside the inventory.

Every test works on its own temporary COPY of inventory/rehearsal with its own known_hosts
copy; the shipped files and spark-01..08's files are never changed (their facts, images and
weights are only read). Extra nodes: spark-09 (bare, like the rack) and spark-10 (driver
575, one HCA missing, a known-bad kernel); both are removed at the end of the module.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rackhealth import LOAD_STARTUP_S, QUICK_BURN_S

from sparkrack.core.errors import UsageError
from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.onboard import baseline, onboard
from sparkrack.rehearsal import nodeproc
from sparkrack.rehearsal.layout import KNOWN_HOSTS
from sparkrack.rehearsal.privatecopy import copy_inventory as private_copy
from sparkrack.rehearsal.privatecopy import host_key_fingerprint
from sparkrack.safety.burn import burn
from sparkrack.transfer.manifest import MANIFEST_NAME

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
NEW, NEW_ADDR, NEW_ROCE, NEW_TWIN = "spark-09", "10.77.1.19", "10.77.3.19", "10.77.4.19"
ODD, ODD_ADDR = "spark-10", "10.77.1.20"
MODEL = "/models/GLM-5.3-NVFP4"


@pytest.fixture(scope="module")
def extras(rack):
    """The two extra nodes, bare, for this module; removed afterwards."""
    for name in (NEW, ODD):
        if name in rack.extras:
            rack.remove_node(name)
    rack.add_node(NEW, NEW_ADDR)
    rack.add_node(ODD, ODD_ADDR, driver_version="575.51.03", missing_hcas=("roceP2p1s0f0",),
                  kernel="7.0.0-1019-nvidia")
    for name in (NEW, ODD):
        rack.load_startup(name, LOAD_STARTUP_S)
    yield rack
    for name in (NEW, ODD):
        if name in rack.extras:
            rack.remove_node(name)


def copy_inventory(tmp_path: Path) -> Path:
    """A private copy of the rehearsal inventory with its own known_hosts."""
    return private_copy(REPO / "inventory" / "rehearsal", tmp_path / "inventory")


def wipe(rack, name: str) -> None:
    """The extra node bare again (a new disk, a new host key), its burn load quick to start
    as on the rack's nodes during the suite."""
    rack.wipe(name)
    rack.load_startup(name, LOAD_STARTUP_S)


def console_fingerprint(rack, name: str) -> str:
    """The host key fingerprint as an operator reads it on the node's console."""
    return host_key_fingerprint(rack, name)


def in_node(rack, name: str, *argv: str):
    return nodeproc.in_node(rack.node(name), list(argv), timeout=60)


def files_of(inv_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(inv_dir)): p.read_bytes() for p in sorted(inv_dir.rglob("*"))
            if p.is_file()}


def quiet_burn(inventory, nodes, **kwargs):
    """The burn gate without writing burn records on the rack's nodes."""
    return burn(inventory, nodes, seconds=QUICK_BURN_S, **{**kwargs, "record": False})


def test_extra_nodes_are_bare_and_persist_in_rack_state(extras):
    from sparkrack.rehearsal.rack import RehearsalRack

    states = {s.name: s for s in extras.status()}
    assert states[NEW].extra and states[ODD].extra and not states["spark-01"].extra
    assert states[NEW].ssh_open and states[ODD].ssh_open
    assert NEW_ADDR not in KNOWN_HOSTS.read_text() and ODD_ADDR not in KNOWN_HOSTS.read_text()
    bare = in_node(extras, NEW, "sh", "-c", "ls /etc/sparkrack /models 2>&1; docker images -q; "
                   "systemctl is-active docker ssh; cat /sys/class/net/enp1s0f0np0/mtu")
    assert bare.stdout.split("\n")[:2] == [
        "ls: cannot access '/etc/sparkrack': No such file or directory",
        "ls: cannot access '/models': No such file or directory"]
    # the installer's fabric config (MTU 1500): onboarding's provisioning gives it the rack's
    assert bare.stdout.split()[-3:] == ["active", "active", "1500"]
    odd = in_node(extras, ODD, "sh", "-c", "nvidia-smi --query-gpu=driver_version "
                  "--format=csv,noheader; ls /sys/class/infiniband; uname -r")
    assert odd.stdout.split() == ["575.51.03", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1",
                                  "7.0.0-1019-nvidia"]
    # a fresh rack object sees them; a powered-off extra node comes back with `up`, as it was
    again = RehearsalRack(extras.inventory, say=lambda message: None)
    assert sorted(again.extras) == [NEW, ODD]
    key_before = console_fingerprint(extras, ODD)
    again.poweroff(ODD)
    assert nodeproc.init_pid(again.node(ODD)) is None
    pids = {n.name: nodeproc.init_pid(n) for n in again.nodes}
    again.up()
    assert nodeproc.init_pid(again.node(ODD)) is not None
    assert {n.name: nodeproc.init_pid(n) for n in again.nodes} == pids  # members untouched
    assert console_fingerprint(extras, ODD) == key_before
    with pytest.raises(Exception, match="only extra nodes can be wiped"):
        again.wipe("spark-05")


def test_bare_ninth_node_is_onboarded_end_to_end(extras, tmp_path):
    inv_dir = copy_inventory(tmp_path)
    hosts_before = (inv_dir / "hosts.yml").read_text()
    report = onboard(load_inventory(inv_dir), NEW, NEW_ADDR,
                     fingerprint=console_fingerprint(extras, NEW), assume_yes=True,
                     burn_seconds=2)
    assert report.exit_code == 0, [(s.name, s.verdict, s.summary) for s in report.steps]
    assert [s.verdict for s in report.steps] == ["changed", "ok", "changed", "changed", "ok",
                                                 "changed"]
    assert not any(d.refuses for d in report.differences)
    # the inventory: the new entry, every previous line (comments too) intact and in order
    hosts_after = (inv_dir / "hosts.yml").read_text().splitlines()
    assert [l for l in hosts_after if NEW not in l] == hosts_before.splitlines()
    assert (f"        {NEW}: {{ansible_host: {NEW_ADDR}, roce_addr: {NEW_ROCE}, "
            f"roce_twin_addr: {NEW_TWIN}, spare: true}}" in hosts_after), hosts_after
    # its fabric addresses, found on its nccl_socket_ifname and that port's twin netdev
    edited = load_inventory(inv_dir)
    assert [n.name for n in edited.spares] == [NEW] and len(edited.nodes) == 8
    assert NEW_ADDR in (inv_dir / "known_hosts").read_text()
    # its facts now match the rack (the clock cap too), read afresh
    work = load_inventory(inv_dir)
    nodes = [*work.nodes, work.spares[0]]
    with Fleet(work, nodes) as fleet:
        facts = baseline.gather(fleet, nodes)
        ids = fleet.run(["docker", "image", "inspect", "--format", "{{.Id}}",
                         *work.vars.images.values()], timeout=60)
        manifest = fleet.run({NEW: ["sh", "-c", f"cd {MODEL} && sha256sum -c --quiet "
                                    f"{MANIFEST_NAME}"]}, timeout=60)[NEW]
    members = {n.name: facts[n.name] for n in work.nodes}
    assert baseline.compare(facts[NEW], members, hcas=work.vars.nccl_ib_hca,
                            socket_ifname=work.vars.nccl_socket_ifname) == []
    # its images have the rack's IDs, its weights match the manifest
    assert ids[NEW].ok and ids[NEW].stdout == ids["spark-01"].stdout
    assert len(set(r.stdout for r in ids)) == 1
    assert manifest.ok, manifest.stderr
    # onboarding again changes nothing and copies nothing
    again = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, assume_yes=True,
                    burn_seconds=QUICK_BURN_S)
    assert [s.verdict for s in again.steps] == ["ok"] * 6, [s.summary for s in again.steps]
    assert again.weights.bytes_sent == 0 and not again.weights.copied
    assert (inv_dir / "hosts.yml").read_text().splitlines() == hosts_after


def test_check_mode_writes_nothing(extras, tmp_path):
    inv_dir = copy_inventory(tmp_path)
    before = files_of(inv_dir)
    report = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, check=True,
                     fingerprint=console_fingerprint(extras, NEW))
    assert report.exit_code == 0, report.steps
    verdicts = [s.verdict for s in report.steps]
    assert verdicts[0] == "would" and verdicts[1] == "ok" and verdicts[5] == "would"
    assert "would write" in report.step("join").summary
    assert files_of(inv_dir) == before


def test_different_driver_and_missing_hca_are_refused(extras, tmp_path):
    inv_dir = copy_inventory(tmp_path)
    hosts_before = (inv_dir / "hosts.yml").read_bytes()
    report = onboard(load_inventory(inv_dir), ODD, ODD_ADDR,
                     fingerprint=console_fingerprint(extras, ODD), assume_yes=True)
    assert report.exit_code == 1, report.steps
    step = report.step("baseline")
    assert step.verdict == "refused"
    assert "driver-major (NVIDIA driver: 575.51.03, rack 580.126.09)" in step.summary
    assert "missing-hca (HCA roceP2p1s0f0: missing" in step.summary
    assert "known-bad-kernel (host kernel: 7.0.0-1019-nvidia" in step.summary
    assert [s.verdict for s in report.steps[2:]] == ["skipped"] * 4
    assert (inv_dir / "hosts.yml").read_bytes() == hosts_before
    assert not (inv_dir / "host_vars").exists()
    on_node = in_node(extras, ODD, "ls", "/etc/sparkrack", MODEL)
    assert on_node.returncode != 0  # nothing provisioned or staged on the refused node
    # waived, the same node passes step 2 (check mode: still nothing written)
    waived = onboard(load_inventory(inv_dir), ODD, ODD_ADDR, check=True, waivers={
        "driver-major": "lab", "missing-hca": "lab", "known-bad-kernel": "lab"})
    assert waived.step("baseline").verdict == "ok"
    assert sum("WAIVED (lab)" in line for line in waived.step("baseline").details) == 3


def test_a_changed_host_key_is_refused(extras, tmp_path):
    inv_dir = copy_inventory(tmp_path)
    first = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, check=True,
                    fingerprint=console_fingerprint(extras, NEW))
    assert first.exit_code == 0, first.steps
    # record the key as an earlier onboarding would have, then reinstall the node
    (inv_dir / "known_hosts").write_text(
        (inv_dir / "known_hosts").read_text() + f"{NEW_ADDR} ssh-ed25519 " +
        in_node(extras, NEW, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
        + "\n")
    before = files_of(inv_dir)
    wipe(extras, NEW)
    report = onboard(load_inventory(inv_dir), NEW, NEW_ADDR,
                     fingerprint=console_fingerprint(extras, NEW), assume_yes=True)
    assert report.exit_code == 1 and report.step("trust").verdict == "refused"
    assert "host key CHANGED" in report.step("trust").summary
    assert first.fingerprint in report.step("trust").summary  # the recorded one is named
    assert files_of(inv_dir) == before


def test_replace_spark05_takes_its_rank_and_up_forms_the_group(extras, tmp_path, gate_burn):
    from sparkrack.deployments import record
    from sparkrack.deployments.ranks import engine_containers
    from sparkrack.lifecycle import lanes
    from sparkrack.rehearsal.stub.config import CONFIG_NAME

    wipe(extras, NEW)  # a bare node again, new host key
    inv_dir = copy_inventory(tmp_path)
    hosts_before = (inv_dir / "hosts.yml").read_text().splitlines()
    report = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, replace="spark-05",
                     fingerprint=console_fingerprint(extras, NEW), assume_yes=True,
                     burn_seconds=2)
    assert report.exit_code == 0, [(s.name, s.verdict, s.summary) for s in report.steps]
    assert report.rank == 4 and "joins the TP group at the next" in report.message
    hosts_after = (inv_dir / "hosts.yml").read_text().splitlines()
    swapped = hosts_before.index(
        "        spark-05: {ansible_host: 10.77.1.15, roce_addr: 10.77.3.15, "
        "roce_twin_addr: 10.77.4.15, rank: 4}")
    assert hosts_after[swapped] == \
        f"        {NEW}: {{ansible_host: {NEW_ADDR}, roce_addr: {NEW_ROCE}, " \
        f"roce_twin_addr: {NEW_TWIN}, rank: 4}}"
    assert hosts_after[:swapped] + hosts_after[swapped + 1:] == \
        hosts_before[:swapped] + hosts_before[swapped + 1:]
    copy = load_inventory(inv_dir)
    assert copy.node(NEW).rank == 4 and "spark-05" not in [n.name for n in copy.nodes]
    assert "10.77.1.15" not in (inv_dir / "known_hosts").read_text()

    # the box under spark-09's name and address is swapped again (new host key): --replace
    # spark-09 takes the new key in place of the recorded one
    wipe(extras, NEW)
    fingerprint = console_fingerprint(extras, NEW)
    with pytest.raises(UsageError, match="already a member of the rack"):
        onboard(load_inventory(inv_dir), NEW, NEW_ADDR, fingerprint=fingerprint)
    swapped_again = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, replace=NEW,
                            fingerprint=fingerprint, assume_yes=True, burn_seconds=QUICK_BURN_S)
    assert swapped_again.exit_code == 0, [(s.name, s.verdict, s.summary)
                                          for s in swapped_again.steps]
    assert "replaces the key recorded for 10.77.1.19" in swapped_again.step("trust").details[0]
    assert swapped_again.rank == 4 and swapped_again.step("join").verdict == "ok"
    assert (inv_dir / "known_hosts").read_text().count(NEW_ADDR) == 1
    assert (inv_dir / "hosts.yml").read_text().splitlines() == hosts_after

    # a following `up` forms the group with the new node
    with Fleet(copy) as fleet:
        running, errors = engine_containers(fleet)
        assert not [r for r in running if r.alive] and not errors, running[:1] or errors
        settings = fleet.get({"spark-06": [f"{MODEL}/{CONFIG_NAME}"]})["spark-06"]
        if settings.ok:  # the stub's own settings (not model data): as the rack has them
            fleet.put({NEW: [(settings.files[f"{MODEL}/{CONFIG_NAME}"],
                              f"{MODEL}/{CONFIG_NAME}", 0o644)]}).raise_for_failures()
        before = record.read(fleet, copy)
    try:
        gate_burn(quiet_burn)
        deployment = lanes.up(copy, "sglang", "512k", timeout=240)
    except lanes.Refused as refused:
        if "no other engine" in str(refused):
            pytest.skip(f"the rack became busy: {refused}")
        raise
    try:
        with Fleet(copy) as fleet:
            running, _ = engine_containers(fleet)
        ranks = {r.rank: r.node for r in running if r.alive}
        assert ranks[4] == NEW and len(ranks) == 8
        assert deployment.engine == "sglang"
    finally:
        lanes.down(copy)
        with Fleet(copy) as fleet:  # the head's last-good record as the rack had it
            if before["last-good"] is not None:
                record.write(fleet, copy, "last-good", before["last-good"])
            else:
                record.clear(fleet, copy, "last-good")


def cli(inv_dir: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    """`invoke ARGS -i inv_dir` as an operator runs it, with its own local state."""
    env = {**os.environ, "SPARKRACK_SANDBOX": "1", "SPARKRACK_STATE_DIR": str(state),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", str(inv_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=240, env=env,
                          stdin=subprocess.DEVNULL)


def test_a_lost_head_is_replaced_by_a_spare_that_takes_the_lock_log_and_records(
        extras, engine_rack, tmp_path, monkeypatch):
    """spark-01 (the head) loses power for good while SGLang serves: break-glass stops the
    workers, then `onboard --replace spark-01` runs without the lock (none can be taken),
    makes spark-09 rank 0, and moves the audit log and records there from this machine's
    copies; the next task takes the lock on spark-09."""
    from sparkrack.deployments import record
    from sparkrack.lifecycle import lanes
    from sparkrack.oplock.audit import parse_lines, verify_chain
    from sparkrack.oplock.remote import AUDIT_FILE

    wipe(extras, NEW)
    inv_dir, state = copy_inventory(tmp_path), tmp_path / "state"
    with Fleet(engine_rack, [engine_rack.head]) as fleet:
        before = record.read(fleet, engine_rack)
    try:
        started = cli(inv_dir, state, "up", "--engine", "sglang")
        assert started.returncode == 0, started.stdout + started.stderr
        monkeypatch.setenv("SPARKRACK_STATE_DIR", str(state))  # the operator's machine
        serving = record.mirrored(load_inventory(inv_dir))["last-good"]
        assert serving is not None and serving.engine == "sglang"
        extras.poweroff("spark-01")
        glass = cli(inv_dir, state, "break-glass", "spark-01 lost its PSU", "--yes",
                    "--timeout", "3", "--grace", "3")
        assert glass.returncode == 0, glass.stdout + glass.stderr

        swap = cli(inv_dir, state, "onboard", NEW, NEW_ADDR, "--replace", "spark-01",
                   "--fingerprint", console_fingerprint(extras, NEW), "--yes",
                   "--burn-seconds", str(QUICK_BURN_S))
        said = swap.stdout + swap.stderr
        assert swap.returncode == 0, said
        assert "lock: none taken (rack lock on spark-01: spark-01 (10.77.1.11): " in said, said
        assert (f"spark-01 was the head: its audit log and records move to {NEW} (from this "
                "machine's copies") in said, said
        assert "audit log (spark-01, from this machine's copies (" in said, said
        assert "): the chain holds: " in said, said
        assert f"record current ({serving.deployment_id}) not moved: none of its ranks runs" \
            in said, said
        assert f"record last-good: {serving.describe()}" in said, said
        assert f"{NEW} is the head now" in said, said
        joined = load_inventory(inv_dir)
        assert joined.head.name == NEW and joined.head.rank == 0

        stopped = cli(inv_dir, state, "down")  # the lock is taken on the new head
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        with Fleet(joined, [joined.head]) as fleet:
            log = fleet.run(["cat", AUDIT_FILE])[NEW]
            records = record.read(fleet, joined)
        assert verify_chain(log.stdout).ok, verify_chain(log.stdout).describe(NEW)
        entries = parse_lines(log.stdout)
        task_of = {r["id"]: r["task"] for r in entries if r.get("task")}
        tasks = [(task_of.get(r["id"]), r["phase"]) for r in entries]
        assert tasks == [("head-move", "end"), ("up", "start"), ("up", "end"),
                         ("break-glass", "end"),
                         ("onboard", "start"), ("onboard", "end"), ("down", "start"),
                         ("down", "end")], tasks
        assert records["current"] is None
        assert records["last-good"].deployment_id == serving.deployment_id
    finally:
        extras.poweron("spark-01")
        extras.wait_booted([extras.node("spark-01")])
        lanes.down(engine_rack)  # spark-01's rank 0, exited with the power cut
        with Fleet(engine_rack, [engine_rack.head]) as fleet:
            for kind, found in before.items():  # the head's records as the rack had them
                if found is None:
                    record.clear(fleet, engine_rack, kind)
                else:
                    record.write(fleet, engine_rack, kind, found)


def test_interrupted_weight_copy_resumes(extras, tmp_path):
    inv_dir = copy_inventory(tmp_path)
    hosts_before = (inv_dir / "hosts.yml").read_bytes()
    assert in_node(extras, NEW, "rm", "-rf", "/models").returncode == 0
    finder = r'''
import glob, os, signal, sys
have = sum(os.path.getsize(p) for p in glob.glob("/models/**/.*.sparkrack-partial",
                                                  recursive=True))
if have >= int(sys.argv[1]):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and b"class FileSink" in argv[2]:
            os.kill(int(pid), signal.SIGKILL)
            print("killed", have)
'''
    outcome = {}
    run = threading.Thread(target=lambda: outcome.setdefault("first", onboard(
        load_inventory(inv_dir), NEW, NEW_ADDR, fingerprint=console_fingerprint(extras, NEW),
        assume_yes=True, bwlimit=16384, burn_seconds=QUICK_BURN_S)))
    run.start()
    killed = False
    deadline = time.monotonic() + 60
    while run.is_alive() and time.monotonic() < deadline and not killed:
        killed = "killed" in in_node(extras, NEW, "python3", "-c", finder, "20000").stdout
        time.sleep(0.2)
    run.join()
    first = outcome["first"]
    assert killed, [(s.name, s.verdict, s.summary) for s in first.steps]
    assert first.exit_code == 1 and first.step("stage").verdict == "failed"
    assert "ended without a report" in first.step("stage").summary
    assert (inv_dir / "hosts.yml").read_bytes() == hosts_before
    again = onboard(load_inventory(inv_dir), NEW, NEW_ADDR, assume_yes=True,
                    burn_seconds=QUICK_BURN_S)
    assert again.exit_code == 0, [(s.name, s.verdict, s.summary) for s in again.steps]
    weights = again.weights
    assert weights.verified and weights.resumed and min(weights.resumed.values()) >= 20000
    assert weights.bytes_sent < weights.total_bytes
    check = in_node(extras, NEW, "sh", "-c", f"cd {MODEL} && sha256sum -c --quiet {MANIFEST_NAME}")
    assert check.returncode == 0, check.stdout + check.stderr
