"""Provisioning on the rehearsal rack: the acceptance criteria of issue 3 (file roles).

Every test starts from the state it needs (unprovisioned "fresh" nodes, or provisioned)
so they run in any order; the module leaves the rack as it found it: provisioned if it
was, else unprovisioned; hardware descriptions, links and caps restored.
"""

import json
import os
from contextlib import contextmanager

import pytest
from provision_helpers import failures, inventory_copy, snapshot

from sparkrack.cli import provision_tasks
from sparkrack.core.errors import InventoryError
from sparkrack.engineenv import parse_env
from sparkrack.facts.node import CLOCK_CAP_UNIT
from sparkrack.fleet import Fleet, sh
from sparkrack.provision import provision, unprovision
from sparkrack.provision.report import as_json

pytestmark = pytest.mark.rack

FILE_ROLES = "clock_cap,node_limits,nccl_env,engine_env"
HARDWARE = "/etc/gpu-sim/hardware.json"
ROCE_MOUNT = "/usr/local/lib/sparkrack-sim/roce/roce-mount"
NCCL_ENV = "/etc/sparkrack/nccl.env"


@pytest.fixture(scope="module", autouse=True)
def as_found(rack, inventory):
    """Note whether the rack was provisioned; put it back that way at the end."""
    for node in rack.nodes:  # a run killed mid-way may have left a cable out
        rack.heal(node.name)
    before = provision(inventory, roles=FILE_ROLES, check=True)
    was_provisioned = before.exit_code == 0 and before.changed == 0
    yield
    for node in rack.nodes:
        rack.heal(node.name)
    restore = provision if was_provisioned else unprovision
    assert restore(inventory, roles=FILE_ROLES).exit_code == 0


def fresh(inventory, limit=None):
    """Remove what the file roles write (the state of a node never provisioned)."""
    report = unprovision(inventory, limit, roles=FILE_ROLES)
    assert report.exit_code == 0, failures(report)


def provisioned(inventory, limit=None, roles=FILE_ROLES):
    report = provision(inventory, limit, roles=roles)
    assert report.exit_code == 0, failures(report)
    return report


def names(inventory):
    return [node.name for node in inventory.nodes]


def test_check_on_fresh_nodes_shows_changes_and_changes_nothing(inventory):
    fresh(inventory)
    before = snapshot(inventory)
    report = provision(inventory, roles=FILE_ROLES, check=True)
    assert report.exit_code == 0, failures(report)
    assert all(report.recap(name)["changed"] >= 10 for name in names(inventory))
    assert all(run.final is None and run.applied is None for run in report.nodes)
    assert snapshot(inventory) == before


def test_first_run_changes_second_run_changes_and_touches_nothing(inventory):
    fresh(inventory)
    first = provisioned(inventory)
    assert all(first.recap(name)["changed"] >= 10 for name in names(inventory))
    assert all(run.final is not None and not any(c.changed for c in run.final)
               for run in first.nodes)  # the re-plan found everything converged
    settled = snapshot(inventory)
    second = provisioned(inventory)
    assert [second.recap(name)["changed"] for name in names(inventory)] == [0] * 8
    assert all(run.final is None for run in second.nodes)  # nothing to re-plan
    # one command applied per node: the clock lock, which no fact shows, re-applied
    assert all([run.plan[i].task for i in sorted(run.applied.applied)] == [
        "the GPU clock lock in force"] for run in second.nodes)
    assert snapshot(inventory) == settled  # same mtimes, same units, same everything


def test_clock_cap_unit_verifies_is_enabled_and_active(inventory):
    provisioned(inventory, roles="clock_cap")
    script = ('systemd-analyze verify "$1" 2>&1 && systemctl is-enabled "$2" && '
              'systemctl is-active "$2" && systemctl show -p Result --value "$2"')
    with Fleet(inventory) as fleet:
        results = fleet.run(sh(script, f"/etc/systemd/system/{CLOCK_CAP_UNIT}", CLOCK_CAP_UNIT))
    assert [r.status for r in results] == ["ok"] * 8, results.summary()
    assert all(r.stdout.split() == ["enabled", "active", "success"] for r in results)


def test_after_a_reboot_the_cap_is_back_without_provision(rack, inventory):
    from sparkrack.safety.burn import burn
    provisioned(inventory, "spark-07", roles="clock_cap")
    with Fleet(inventory, inventory.select("spark-07")) as fleet:
        boot_before = fleet.run(["cat", "/proc/sys/kernel/random/boot_id"])["spark-07"].stdout
    rack.reboot("spark-07")
    with Fleet(inventory, inventory.select("spark-07")) as fleet:
        after = fleet.run(sh('cat /proc/sys/kernel/random/boot_id; systemctl is-active "$1"',
                             CLOCK_CAP_UNIT))["spark-07"]
        [result] = burn(inventory, "spark-07", seconds=2, record=False, fleet=fleet)
    assert after.stdout.split()[0] != boot_before.strip()
    assert after.stdout.split()[1] == "active"
    assert result.ok and result.max_sm_mhz <= 2200, result.reason


@contextmanager
def hardware(inventory, node, **changes):
    """The node's simulated hardware description changed, then put back as it was."""
    with Fleet(inventory, inventory.select(node)) as fleet:
        original = fleet.get({node: [HARDWARE]})[node].files[HARDWARE]
        data = json.loads(original)
        data.update(changes)
        try:
            assert fleet.put({node: [(json.dumps(data, indent=1).encode(), HARDWARE,
                                      0o644)]})[node].ok
            assert fleet.run([ROCE_MOUNT])[node].ok
            yield
        finally:
            fleet.put({node: [(original, HARDWARE, 0o644)]})
            fleet.run([ROCE_MOUNT])


def read(inventory, node, path) -> str:
    with Fleet(inventory, inventory.select(node)) as fleet:
        return fleet.get({node: [path]})[node].files[path].decode()


def test_gid_table_renumbered_to_5_gives_index_5(inventory):
    provisioned(inventory, "spark-05", roles="nccl_env")
    assert "NCCL_IB_GID_INDEX=3\n" in read(inventory, "spark-05", NCCL_ENV)
    with hardware(inventory, "spark-05", gid_index=5):
        report = provisioned(inventory, "spark-05,spark-06", roles="nccl_env")
        assert report.recap("spark-05")["changed"] == 1 and report.recap("spark-06")[
            "changed"] == 0
        text = read(inventory, "spark-05", NCCL_ENV)
        assert "NCCL_IB_GID_INDEX=5\n" in text and "probed" in text
        assert parse_env(read(inventory, "spark-05", NCCL_ENV))["NCCL_IB_GID_INDEX"] == "5"
        assert parse_env(read(inventory, "spark-06", NCCL_ENV))["NCCL_IB_GID_INDEX"] == "3"
    provisioned(inventory, "spark-05", roles="nccl_env")
    assert "NCCL_IB_GID_INDEX=3\n" in read(inventory, "spark-05", NCCL_ENV)


def test_a_missing_hca_warns_and_none_at_all_fails_the_role(inventory):
    """NCCL skips an NCCL_IB_HCA entry that matches no device and runs on the rails left:
    one twin missing writes nccl.env with a warning naming it (`up` then judges the rails);
    none present (no RoCE at all) fails the role with the fix."""
    with hardware(inventory, "spark-06", missing=["roceP2p1s0f0"]):
        report = provision(inventory, "spark-06", roles="nccl_env,engine_env")
    assert report.exit_code == 0, failures(report)
    warnings = [c.warning for c in report.node("spark-06").outcomes() if c.warning]
    assert len(warnings) == 1 and warnings[0].startswith(
        "HCA roceP2p1s0f0 of nccl_ib_hca is not on spark-06 (its RDMA devices: rocep1s0f0, "
        "rocep1s0f1, roceP2p1s0f1): NCCL skips an entry that matches no device"), warnings
    with hardware(inventory, "spark-06", missing=["rocep1s0f0", "roceP2p1s0f0"]):
        report = provision(inventory, "spark-06", roles="nccl_env,engine_env")
    assert report.exit_code == 1, failures(report)
    failed = [c for c in report.node("spark-06").outcomes() if c.status == "failed"]
    assert len(failed) == 1 and failed[0].role == "nccl_env"
    assert failed[0].summary.startswith(
        "HCA rocep1s0f0, roceP2p1s0f0 missing under /sys/class/infiniband"), failed[0].summary
    assert report.recap("spark-06")["failed"] == 1


def test_node_cut_mid_run_is_unreachable_the_others_converge(rack, inventory):
    fresh(inventory)

    def cut_after_plan(event, report):
        if event == "planned":
            rack.cut("spark-08")

    try:
        report = provision(inventory, roles=FILE_ROLES, on_event=cut_after_plan)
    finally:
        rack.heal("spark-08")
    assert report.exit_code == 1, failures(report)
    assert report.recap("spark-08")["unreachable"] == 1
    for name in names(inventory)[:7]:
        recap = report.recap(name)
        assert recap["changed"] >= 10 and recap["failed"] == 0 and recap["unreachable"] == 0
        assert not any(c.changed for c in report.node(name).final)
    again = provisioned(inventory)
    assert again.recap("spark-08")["changed"] >= 1
    assert [again.recap(name)["changed"] for name in names(inventory)[:7]] == [0] * 7


PWNED = "/tmp/sparkrack-pwned"


def test_shell_metacharacters_land_literally_and_never_run(inventory, tmp_path):
    evil = (f"r; touch {PWNED}-1 $(touch {PWNED}-2) `touch {PWNED}-3` "
            "| tee x & \\ 'single' \"double\" * ?")
    token = f"hf_$(touch {PWNED}-4);`touch {PWNED}-5`"
    with pytest.raises(InventoryError, match="is not a rack name usable as a file name"):
        inventory_copy(inventory.path, tmp_path / "evil", rack_name=evil)  # refused at load
    evil = "rack.with-odd_name"
    odd = inventory_copy(inventory.path, tmp_path / "inv", rack_name=evil)
    try:
        report = provision(odd, "spark-03", roles="nccl_env,engine_env",
                           environ={"HF_TOKEN": token})
        assert report.exit_code == 0, failures(report)
        assert token not in json.dumps(as_json(report))
        with Fleet(inventory, inventory.select("spark-03")) as fleet:
            files = fleet.get({"spark-03": [NCCL_ENV, "/etc/sparkrack/sglang.env",
                                            "/etc/sparkrack/hf/token"]})["spark-03"].files
            leftovers = fleet.run(sh('ls -d "$1"* 2>/dev/null; exit 0', PWNED))["spark-03"]
        assert f"(rack {evil}, role nccl_env)" in files[NCCL_ENV].decode()
        assert files["/etc/sparkrack/hf/token"].decode() == token  # literally, in its own file
        assert "HF_TOKEN=" not in files["/etc/sparkrack/sglang.env"].decode()
        assert leftovers.stdout == "" and not any(
            name.startswith("sparkrack-pwned") for name in os.listdir("/tmp"))
    finally:
        provisioned(inventory, "spark-03", roles="nccl_env,engine_env")


def test_cli_prints_the_plan_and_a_recap_line_per_node(inventory, capsys):
    provisioned(inventory, roles="nccl_env")
    provision_tasks.provision.body(None, inventory=str(inventory.path), role="nccl_env",
                                   check=True, limit="spark-01,spark-02")
    out = capsys.readouterr().out
    assert "spark-01, spark-02: no changes" in out
    assert "spark-01 : ok=7   changed=0   failed=0   skipped=0   unreachable=0" in out
