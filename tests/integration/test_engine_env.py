"""Issue 10 on the rehearsal rack: the engines run with what provisioning wrote on each node.

A reboot that moves spark-05's GID index is written again by `up` there (and only there),
said and audited; the running ranks then carry exactly their node's env files, which are
what `plan` shows. The stub engines fail group init the way NCCL and
Gloo would when a rank's environment does not fit its node; a down HCA is refused by the
gate and, started by hand, fails its rank naming the HCA. Every test puts the hardware,
the env files and the engines back as it found them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from provision_helpers import failures
from stubgroup import Group, nothing_runs

import sparkrack.rehearsal
from sparkrack.engineenv import parse_env
from sparkrack.engines import build_specs
from sparkrack.fleet import Fleet
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import lanes
from sparkrack.provision import provision
from sparkrack.provision.envfiles import rack_view
from sparkrack.rehearsal.cabling import Cabling

pytestmark = pytest.mark.rack
FILES = ("/etc/sparkrack/nccl.env", "/etc/sparkrack/sglang.env")
REPO = Path(__file__).resolve().parents[2]


def engines_running(inventory) -> list:
    return [r for r in nothing_runs(inventory) if r.alive]


@pytest.fixture
def clean(engine_rack, rack):
    """No engine before and after; the hardware and env files put back afterwards."""
    lanes.down(engine_rack)
    yield engine_rack
    lanes.down(engine_rack)
    rack.renumber_gid("spark-05", None)
    for node in ("spark-02", "spark-04"):
        rack.cable(node, Cabling())
    for node in ("spark-03", "spark-05"):
        rack.hca_down(node, "roceP2p1s0f0", down=False)
    assert provision(engine_rack, roles="nccl_env,engine_env").exit_code == 0
    assert engines_running(engine_rack) == []


def node_files(fleet) -> dict[str, dict[str, str]]:
    """{node: its env files merged, nccl.env first}, read straight from the node."""
    got = fleet.get({node.name: list(FILES) for node in fleet.nodes})
    merged = {}
    for result in got:
        assert result.ok, result.error
        merged[result.node] = {k: v for path in FILES
                               for k, v in parse_env(result.files[path].decode()).items()}
    return merged


def container_env(fleet, spec) -> dict[str, str]:
    """What `docker inspect` says the rank's container runs with."""
    attrs = fleet.docker_client(spec.node).containers.get(spec.container_name).attrs
    return dict(item.split("=", 1) for item in attrs["Config"]["Env"])


def next_boot_draw(rack, node: str, want: int) -> int:
    """A seed whose draw for the node's next boot puts the RoCE v2 IPv4 entry at want
    (roce-mount's own draw, as the node will make it)."""
    import importlib.util
    from importlib.machinery import SourceFileLoader

    path = str(Path(sparkrack.rehearsal.__file__).parent / "sim" / "roce" / "roce-mount")
    loader = SourceFileLoader("roce_mount", path)
    mount = importlib.util.module_from_spec(importlib.util.spec_from_loader("roce_mount", loader))
    loader.exec_module(mount)
    boots = rack.node(node).upper / "etc/gpu-sim/boots"
    boot = (int(boots.read_text()) if boots.exists() else 0) + 1
    return next(seed for seed in range(1000)
                if mount.boot_gid_index({"gid_moves": {"seed": seed}}, boot) == want)


def test_a_reboot_that_moves_the_gid_index_is_rewritten_by_up_on_its_node_only(clean, rack,
                                                                              tmp_path):
    """Owners see the RoCE v2 IPv4 entry move across reboots (6, then 5): `invoke up`
    probes again and rewrites that node's NCCL env in the same step, says so, audits it,
    and the rank starts with the new index; the other nodes are not touched."""
    inventory = clean
    rack.gid_moves("spark-05", next_boot_draw(rack, "spark-05", 6))
    rack.reboot("spark-05")
    env = {**os.environ, "SPARKRACK_INVENTORY": str(inventory.path), "NO_COLOR": "1",
           "SPARKRACK_STATE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "invoke", "up", "--engine", "sglang"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("gate gid index: ok - spark-05: NCCL_IB_GID_INDEX 3 -> 6 (its GID table moved, "
            "as at a boot; /etc/sparkrack/nccl.env rewritten as provision would)") \
        in done.stderr, done.stderr
    plan = build_specs(inventory, "sglang", "512k", node_env=rack_view(inventory, "sglang").envs)
    with Fleet(inventory) as fleet:
        files = node_files(fleet)
        gids = [container_env(fleet, spec)["NCCL_IB_GID_INDEX"] for spec in plan]
        port = "/sys/class/infiniband/rocep1s0f0/ports/1"
        table = fleet.run({"spark-05": ["cat", f"{port}/gids/6", f"{port}/gid_attrs/types/6"]})
    assert gids == ["3", "3", "3", "3", "6", "3", "3", "3"]
    assert files["spark-05"]["NCCL_IB_GID_INDEX"] == "6"
    assert table["spark-05"].stdout.splitlines() == ["0000:0000:0000:0000:0000:ffff:0a4d:030f",
                                            "RoCE v2"]  # 10.77.3.15, spark-05's roce_addr
    assert plan[4].env_sources["NCCL_IB_GID_INDEX"] == ("probed on the node (the RoCE v2 entry "
                                                        "of 10.77.3.15, 10.77.4.15) "
                                                        "[/etc/sparkrack/nccl.env]")
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert any((entry.get("changed") or {}).get("gid_moved") == {"spark-05": "3 -> 6"}
               for entry in audit), audit


def test_a_rank_with_a_wrong_gid_index_fails_group_init_naming_it(stub):
    fleet, limits = stub
    with Group(fleet, limits, "sglang", rank_env={4: {"NCCL_IB_GID_INDEX": "1"}}) as group:
        group.start()
        _, codes = group.wait_exited(60)
        log = group.containers[4].logs().decode()
    assert codes[4] == 1 and set(codes.values()) == {1}  # the group went down with it
    assert "spark-05:" in log and "NCCL WARN NET/IB : Got completion from peer with " \
        "status=IBV_WC_RETRY_EXC_ERR(12)" in log
    assert "[rank4]: torch.distributed.DistBackendError: NCCL error in:" in log
    assert "localGidIndex=1" in log and "fe80:" in log


def test_a_rank_whose_gloo_interface_has_no_address_fails_before_the_rendezvous(stub):
    fleet, limits = stub  # port 1's first path: present, no address
    with Group(fleet, limits, "vllm", rank_env={2: {"GLOO_SOCKET_IFNAME": "enp1s0f1np1"}}) \
            as group:
        group.start()
        _, codes = group.wait_exited(30, ranks=[2])
        log = group.containers[2].logs().decode()
    assert codes == {2: 1}
    assert ("[rank2]: RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/"
            "tcp/device.cc:83] ifa != nullptr. Unable to find address for: enp1s0f1np1") in log


def test_a_gloo_address_no_peer_reaches_fails_the_whole_group_naming_it(stub):
    """Gloo takes the interface's first address (here loopback's): rank 0 finds at the
    rendezvous that no peer can connect to it, and the group dies at init."""
    fleet, limits = stub
    with Group(fleet, limits, "vllm", rank_env={2: {"GLOO_SOCKET_IFNAME": "lo"}}) as group:
        group.start()
        _, codes = group.wait_exited(60)
        head = group.containers[0].logs().decode()
    assert set(codes.values()) == {1}
    assert "rank 0 cannot connect to rank 2 at 127.0.0.1 (GLOO_SOCKET_IFNAME's first " \
        "address; no route to host)" in head, head[-2000:]


def test_a_down_hca_is_refused_by_the_gate_and_skipped_in_silence_by_nccl(clean, rack, stub):
    """Issue 56, item 1: the gate refuses a twin down, saying NCCL would run on the rails
    left (not that it would fail); started by hand, the group serves on one rail there, as
    NCCL 2.27.7 skips a port that is not ACTIVE without a word, and its rank says at INFO
    what it uses (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET from nccl.env)."""
    inventory = clean
    fleet, limits = stub
    rack.hca_down("spark-03", "roceP2p1s0f0")
    with pytest.raises(lanes.Refused) as refused:
        lanes.up(inventory, "sglang", "512k")
    assert ("rails: rank 2 on spark-03 would run NCCL on 1 of 2 rails (NET/IB on "
            "rocep1s0f0:1) where the inventory gives it rocep1s0f0, roceP2p1s0f0: the port of "
            "roceP2p1s0f0 is down, and NCCL skips it without an error") in str(refused.value), \
        str(refused.value)
    assert engines_running(inventory) == []
    with Group(fleet, limits, "sglang") as group:
        group.start()
        assert group.wait_healthy(60)
        log = group.containers[2].logs().decode()
        statuses = group.statuses()
    assert all(status == "running" for status, _ in statuses.values()), statuses
    assert "NCCL WARN" not in log
    assert "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:10.77.3.13<0>" \
        in log, log[-2000:]
    assert "NCCL INFO Using network IB" in log
    said: list[str] = []  # up starts it only with --allow-degraded, and says so
    deployment = lanes.up(inventory, "sglang", "512k", allow_degraded=True,
                          on_event=said.append)
    assert deployment.engine == "sglang" and len(engines_running(inventory)) == 8
    assert any(line.startswith("gate rails: warn - rank 2 on spark-03 would run NCCL on 1 of 2 "
                               "rails") for line in said), said
    assert ("NCCL runs degraded, started anyway (--allow-degraded): rank 2 on spark-03 runs "
            "NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where the inventory gives it "
            "rocep1s0f0, roceP2p1s0f0") in "\n".join(said), said
    shown = subprocess.run([sys.executable, "-m", "invoke", "status", "-i", str(inventory.path)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ("nccl: rank 2 on spark-03: NET/IB on rocep1s0f0:1 (DEGRADED: fewer rails than "
            "nccl_ib_hca, started with --allow-degraded); the other 7: NET/IB on "
            "roceP2p1s0f0:1, rocep1s0f0:1") in shown.stdout, shown.stdout + shown.stderr
    lanes.down(inventory)
    rack.hca_down("spark-03", "roceP2p1s0f0", down=False)
    lanes.up(inventory, "sglang", "512k")  # the port back: it starts


def test_a_misnamed_hca_entry_is_provisioned_with_a_warning_and_serves_only_degraded(
        clean, tmp_path):
    """Issue 56, item 1 (done when): spark-03's host_vars name its twin rocep2p1s0f0, a typo
    of roceP2p1s0f0 (`ibdev2netdev` prints the capital P). Provisioning writes what the
    inventory says and warns naming the node, the entry and the devices it has; `up`
    refuses it naming the rank, what NCCL will use and the fix; with --allow-degraded it
    serves on one rail, and `invoke status` says so."""
    copy = tmp_path / "inventory"
    shutil.copytree(clean.path, copy)
    (copy / "host_vars").mkdir(exist_ok=True)
    (copy / "host_vars" / "spark-03.yml").write_text("nccl_ib_hca: [rocep1s0f0, rocep2p1s0f0]\n")
    typo = load_inventory(copy)
    report = provision(typo, "spark-03", roles="nccl_env")
    assert report.exit_code == 0, failures(report)
    assert [c.warning for c in report.node("spark-03").outcomes() if c.warning] == [
        "HCA rocep2p1s0f0 of nccl_ib_hca is not on spark-03 (its RDMA devices: rocep1s0f0, "
        "rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1): NCCL skips an entry that matches no device "
        "without an error and runs on the rails left (rocep1s0f0: 1 of 2); nccl.env is "
        "written as the inventory says, and `invoke up` refuses spark-03 until nccl_ib_hca in "
        "host_vars/spark-03.yml names its HCAs, or starts it with --allow-degraded"]
    with Fleet(typo) as fleet:
        assert node_files(fleet)["spark-03"]["NCCL_IB_HCA"] == "rocep1s0f0,rocep2p1s0f0"
    with pytest.raises(lanes.Refused) as refused:
        lanes.up(typo, "sglang", "512k")
    assert ("rails: rank 2 on spark-03 would run NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) "
            "where the inventory gives it rocep1s0f0, rocep2p1s0f0: spark-03 has no HCA "
            "rocep2p1s0f0 (its RDMA devices: rocep1s0f0, rocep1s0f1, roceP2p1s0f0, "
            "roceP2p1s0f1), and NCCL skips it without an error: about 1/2 of the bandwidth; "
            "`invoke run --limit spark-03 -- ibdev2netdev` shows its HCAs and their ports; fix "
            "nccl_ib_hca in host_vars/spark-03.yml") in str(refused.value), str(refused.value)
    assert engines_running(typo) == []
    said: list[str] = []
    lanes.up(typo, "sglang", "512k", allow_degraded=True, on_event=said.append)
    try:
        assert len(engines_running(typo)) == 8
        assert ("NCCL runs degraded, started anyway (--allow-degraded): rank 2 on spark-03 runs "
                "NCCL on 1 of 2 rails (NET/IB on rocep1s0f0:1) where the inventory gives it "
                "rocep1s0f0, rocep2p1s0f0") in "\n".join(said), said
        shown = subprocess.run([sys.executable, "-m", "invoke", "status", "-i", str(copy)],
                               cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        lanes.down(typo)
    assert ("nccl: rank 2 on spark-03: NET/IB on rocep1s0f0:1 (DEGRADED: fewer rails than "
            "nccl_ib_hca, started with --allow-degraded); the other 7: NET/IB on "
            "roceP2p1s0f0:1, rocep1s0f0:1") in shown.stdout, shown.stdout + shown.stderr


def test_a_node_cabled_on_the_other_port_is_refused_until_its_host_vars_say_so(clean, rack,
                                                                              tmp_path):
    """The report's rack uses port 0; NVIDIA's two-Spark playbook cables port 1. spark-04
    recabled to port 1: `up` names it, what is up there and the values to set; with them in
    host_vars/spark-04.yml and provisioned there, its rank runs on port 1."""
    rack.cable("spark-04", Cabling(port=1))
    with pytest.raises(lanes.Refused) as refused:
        lanes.up(clean, "sglang", "512k")
    message = str(refused.value)
    assert ("rails: rank 3 on spark-04 would run NCCL over NET/Socket (TCP) on enp1s0f0np0 where "
            "the inventory gives it NET/IB on rocep1s0f0, roceP2p1s0f0: the ports of rocep1s0f0, "
            "roceP2p1s0f0 are down" in message), message
    assert ("up on spark-04: rocep1s0f1 (enp1s0f1np1); roceP2p1s0f1 (enP2p1s0f1np1); if it is "
            "cabled there, set in host_vars/spark-04.yml: nccl_ib_hca: [rocep1s0f1, "
            "roceP2p1s0f1], nccl_socket_ifname: enp1s0f1np1") in message, message
    assert engines_running(clean) == []

    copy = tmp_path / "inventory"
    shutil.copytree(clean.path, copy)
    (copy / "host_vars").mkdir(exist_ok=True)
    (copy / "host_vars" / "spark-04.yml").write_text(
        "nccl_ib_hca: [rocep1s0f1, roceP2p1s0f1]\nnccl_socket_ifname: enp1s0f1np1\n")
    recabled = load_inventory(copy)
    report = provision(recabled, "spark-04", roles="fabric,nccl_env")
    assert report.exit_code == 0, failures(report)
    lanes.up(recabled, "sglang", "512k")
    try:
        plan = build_specs(recabled, "sglang", "512k",
                           node_env=rack_view(recabled, "sglang").envs)
        with Fleet(recabled) as fleet:
            envs = {spec.node: container_env(fleet, spec) for spec in plan}
            args = fleet.docker_client("spark-04").containers.get(
                plan[3].container_name).attrs["Args"]
    finally:
        lanes.down(recabled)
    assert [envs["spark-04"][k] for k in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "SGLANG_HOST_IP")
            ] == ["rocep1s0f1,roceP2p1s0f1", "enp1s0f1np1", "10.77.3.14"]
    assert [envs["spark-05"][k] for k in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "SGLANG_HOST_IP")
            ] == ["rocep1s0f0,roceP2p1s0f0", "enp1s0f0np0", "10.77.3.15"]
    assert args[args.index("--dist-init-addr") + 1] == "10.77.3.11:20000"  # the fabric


def node_kernel(inventory, node: str) -> tuple[str, str, str, str]:
    """(uname -r, CmaTotal kB, CmaFree kB, /proc/cmdline) as the node shows them."""
    with Fleet(inventory, inventory.select(node)) as fleet:
        done = fleet.run(["sh", "-c", "uname -r; awk '/^Cma/ {print $2}' /proc/meminfo; "
                          "cat /proc/cmdline"])[node]
    release, total, free, cmdline = done.stdout.splitlines()
    return release, total, free, cmdline


def kernel_refusal(inventory) -> str:
    """The HOST-KERNEL line of `up`'s refusal."""
    with pytest.raises(lanes.Refused) as refused:
        lanes.up(inventory, "sglang", "512k")
    message = str(refused.value)
    assert "HOST-KERNEL: a node's host kernel breaks RDMA memory registration" in message
    return message.split("HOST-KERNEL")[1].split("\n")[0]


def test_the_kernel_rule_judges_the_kho_symptom_not_the_release(clean, rack):
    """spark-06 boots 7.0.0-1019-nvidia: KHO leaves CmaTotal 0 with CmaFree ~9.7 GiB, and
    `up` is refused naming it; the same breakage under another release too. Booted with
    kho=off (both counters 0), the same release passes the rules and the group serves."""
    try:
        rack.kernel("spark-06", "7.0.0-1019-nvidia")
        release, total, free, cmdline = node_kernel(clean, "spark-06")
        assert (release, total, free) == ("7.0.0-1019-nvidia", "0", "10171187")
        assert "kho=" not in cmdline and "vmlinuz-7.0.0-1019-nvidia" in cmdline
        line = kernel_refusal(clean)
        assert "spark-06" in line and "host kernel 7.0.0-1019-nvidia: CmaFree 10171187 kB " \
            "above its CmaTotal 0 kB" in line, line
        rack.kernel("spark-06", "7.0.0-1031-nvidia", kho_bug=True, cmdline="cma=32M")
        assert node_kernel(clean, "spark-06")[1:3] == ("32768", "9993955")  # the 2nd form
        assert "host kernel 7.0.0-1031-nvidia: CmaFree 9993955 kB above its CmaTotal " \
            "32768 kB" in kernel_refusal(clean)
        assert engines_running(clean) == []
        rack.kernel("spark-06", "7.0.0-1019-nvidia", cmdline="kho=off")
        release, total, free, cmdline = node_kernel(clean, "spark-06")
        assert (release, total, free) == ("7.0.0-1019-nvidia", "0", "0")
        assert cmdline.endswith(" kho=off")
        deployment = lanes.up(clean, "sglang", "512k")
        assert deployment.engine == "sglang" and len(engines_running(clean)) == 8
    finally:
        rack.kernel("spark-06", None)
    assert node_kernel(clean, "spark-06")[:3] == ("6.17.0-1008-nvidia", "0", "0")


def test_a_fabric_address_lost_after_a_reboot_is_refused_before_any_rank_starts(clean):
    """Issue 56, item 5: NetworkManager dropped spark-03's fabric address (flushed here).
    `up` names the node, the netdev, what it has and the fix, not the env files' comments,
    and starts nothing; the fix it names puts the address back."""
    inventory = clean
    with Fleet(inventory, inventory.select("spark-03")) as fleet:
        fleet.run(["ip", "-4", "addr", "flush", "dev", "enp1s0f0np0"]).raise_for_failures()
    try:
        with pytest.raises(lanes.Refused) as refused:
            lanes.up(inventory, "sglang", "512k")
        message = str(refused.value)
        assert ("fabric addresses: spark-03: enp1s0f0np0 (rocep1s0f0) has no IPv4 address "
                "(only its IPv6 link-local one), not the inventory's 10.77.3.13: "
                "NetworkManager can drop a fabric address at boot") in message, message
        assert "`invoke provision --role fabric`" in message
        assert "comments differ" not in message
        assert engines_running(inventory) == []
    finally:
        assert provision(inventory, roles="fabric").exit_code == 0
    with Fleet(inventory, inventory.select("spark-03")) as fleet:
        shown = fleet.run(["ip", "-4", "-o", "addr", "show", "dev", "enp1s0f0np0"])
    assert "10.77.3.13/" in shown["spark-03"].stdout


def test_a_rank_on_a_kho_kernel_fails_memory_registration_after_its_load(stub, rack):
    """Started by hand past the rules, NCCL on a KHO kernel fails as on real Sparks: group
    init passes, the registration after the weights load (108 GiB committed on the node:
    NV-Kernels#591) fails with ENOMEM, and sparkrack's failure line says what happened."""
    from sparkrack.deployments.ranks import Rank
    from sparkrack.lifecycle.start import rank_failed
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    fleet, limits = stub
    rack.kernel("spark-03", "7.0.0-1019-nvidia")
    write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50, "rank_mem_gib": 100})
    try:
        with Group(fleet, limits, "sglang") as group:
            group.start()
            _, codes = group.wait_exited(60)
            log = group.containers[2].logs().decode()
    finally:
        rack.kernel("spark-03", None)
        write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50})
    assert codes[2] == 1 and set(codes.values()) == {1}  # the group went down with it
    assert "spark-03:" in log and "NCCL WARN Call to ibv_reg_mr_iova2 failed with error " \
        "Cannot allocate memory" in log
    assert log.index("Init torch distributed ends.") < log.index("Load weight end") < \
        log.index("ibv_reg_mr_iova2")  # not at init: after the load
    assert "[rank2]: torch.distributed.DistBackendError: NCCL error in:" in log
    rank = Rank(node="spark-03", rank=2, name="r2", engine="sglang", profile="512k",
                deployment="d", status="exited", exit_code=1, stop_timeout=10)
    assert rank_failed(rank, log.splitlines()).line().startswith(
        "rank 2 on spark-03 exited (exit code 1): memory registration failed (ibv_reg_mr: "
        "ENOMEM) on spark-03: a host kernel with Kexec HandOver on")


def test_up_with_the_fabric_check_refuses_a_rail_trained_low_and_starts_on_a_fit_fabric(clean,
                                                                                       rack):
    rack.cable("spark-02", Cabling(rate_mbit=50))
    with pytest.raises(lanes.Refused) as refused:
        lanes.up(clean, "vllm", "512k", fabric_check=True)
    message = str(refused.value)
    assert "fabric: spark-01 -> spark-02 on enp1s0f0np0 (rocep1s0f0): " in message, message
    assert "probably spark-02's enp1s0f0np0" in message
    assert engines_running(clean) == []
    rack.cable("spark-02", Cabling())
    deployment = lanes.up(clean, "vllm", "512k", fabric_check=True)
    assert deployment.phases["fabric"] > 0


GATED = "zai-org/GLM-5.3"
TOKEN_DIR = "/etc/sparkrack/hf"
READ_AS_THE_ENGINE = ("import os; from sparkrack_stub.hubtoken import hub_token; "
                      "print(hub_token(os.environ))")


def test_the_hub_token_is_a_read_only_file_in_every_rank_never_in_docker_inspect(clean, rack):
    """Issue 46 item 8: HF_TOKEN passed as container environment shows in `docker inspect`.
    Provisioned with a token, every node holds it in a 0600 file (folder 0700); each rank
    of a lane that needs it (the stub reads it as huggingface_hub does) gets HF_TOKEN_PATH
    and the folder bound read-only, never the token; a token provisioned anew is what the
    running ranks read next; without one the lane fails as the engine does."""
    from sparkrack.lifecycle.start import StartFailed
    from sparkrack.rehearsal.stub.config import CONFIG_NAME
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    inventory = clean
    token, rotated = f"hf_{secrets.token_hex(12)}", f"hf_{secrets.token_hex(12)}"
    settings = f"{inventory.vars.model_path}/{CONFIG_NAME}"
    with Fleet(inventory, [inventory.head]) as fleet:
        found = json.loads(fleet.run(["cat", settings])[inventory.head.name].stdout)
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {**found, "gated_repo": GATED})
    try:
        assert provision(inventory, roles="engine_env",
                         environ={"HF_TOKEN": token}).exit_code == 0
        lanes.up(inventory, "sglang", "512k")
        specs = build_specs(inventory, "sglang", "512k")
        with Fleet(inventory) as fleet:
            modes = fleet.run(["stat", "-c", "%a %U:%G %n", TOKEN_DIR, f"{TOKEN_DIR}/token"])
            assert {r.node: r.stdout for r in modes} == {
                n.name: f"700 root:root {TOKEN_DIR}\n600 root:root {TOKEN_DIR}/token\n"
                for n in inventory.nodes}
            for spec in specs:
                container = fleet.docker_client(spec.node).containers.get(spec.container_name)
                attrs = container.attrs
                assert token not in json.dumps(attrs)  # docker inspect, all of it
                env = attrs["Config"]["Env"]
                assert f"HF_TOKEN_PATH={TOKEN_DIR}/token" in env
                assert not [e for e in env if e.startswith(("HF_TOKEN=", "HUGGING_FACE_HUB"))]
                assert {(m["Source"], m["Destination"], m["RW"]) for m in attrs["Mounts"]
                        if m["Destination"] == TOKEN_DIR} == {(TOKEN_DIR, TOKEN_DIR, False)}
                log = container.logs().decode()
                assert f"Hugging Face token for {GATED} read from {TOKEN_DIR}/token" in log
                read = container.exec_run(["python3", "-c", READ_AS_THE_ENGINE])
                assert (read.exit_code, read.output.decode().strip()) == (0, token)
            assert provision(inventory, roles="engine_env",
                             environ={"HF_TOKEN": rotated}).exit_code == 0
            rank = fleet.docker_client(specs[3].node).containers.get(specs[3].container_name)
            read = rank.exec_run(["python3", "-c", READ_AS_THE_ENGINE])
            assert read.output.decode().strip() == rotated  # no restart: the folder is bound
        lanes.down(inventory)

        assert provision(inventory, roles="engine_env", environ={}).exit_code == 0
        with Fleet(inventory) as fleet:
            assert {r.exit_code for r in fleet.run(["test", "-e", f"{TOKEN_DIR}/token"])} == {1}
        with pytest.raises(StartFailed) as failed:
            lanes.up(inventory, "sglang", "512k")
        assert "GatedRepoError: 401 Client Error." in failed.value.line()
    finally:
        lanes.down(inventory)
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, found)
