"""The shipped roles and the role-file checks, planned against facts (no network)."""

import configparser
import dataclasses
import hashlib
import ipaddress
import re
import time
from pathlib import Path

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.facts.files import FileFacts
from sparkrack.facts.node import CLOCK_CAP_UNIT
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.roce import Function, HcaFacts, RoceFacts
from sparkrack.inventory import load_inventory
from sparkrack.provision.changes import Put
from sparkrack.provision.plan import plan_node
from sparkrack.provision.renderer import Renderer, RenderError
from sparkrack.provision.roles import (
    ROLES_DIR,
    load_role,
    load_roles,
    node_vars,
    render_tasks,
    roles_path,
    site_roles,
)
from sparkrack.provision.roletasks import RoleError

REPO = Path(__file__).resolve().parents[3]
V4 = "0000:0000:0000:0000:0000:ffff:0a4d:010b"
LL = "fe80:0000:0000:0000:ba3f:d2ff:fea2:1a04"


def mapped(address: str) -> str:
    """An IPv4 address's IPv4-mapped GID as sysfs prints it."""
    return ipaddress.IPv6Address(f"::ffff:{address}").exploded


def hca(index: int, address: str = "10.77.3.11") -> HcaFacts:
    return HcaFacts(present=True, state="4: ACTIVE", netdevs=("enp1s0f0np0",),
                    types={0: "IB/RoCE v1", 1: "RoCE v2", index - 1: "IB/RoCE v1",
                           index: "RoCE v2"},
                    gids={0: LL, 1: LL, index - 1: mapped(address), index: mapped(address)})


def good_facts(gid_a=3, gid_b=3, node=11) -> ProvisionFacts:
    """spark-NN's twins (roce_addr 10.77.3.NN, roce_twin_addr 10.77.4.NN) at those indexes."""
    return ProvisionFacts(roce=RoceFacts({"rocep1s0f0": hca(gid_a, f"10.77.3.{node}"),
                                          "roceP2p1s0f0": hca(gid_b, f"10.77.4.{node}")}),
                          netdevs=("lo", "enp1s0f0np0", "enP2p1s0f0np0"), images={})


def planned(roles="nccl_env", facts=None, inventory="inventory/rehearsal", node="spark-01",
            environ=None, absent=False):
    inv = load_inventory(REPO / inventory)
    loaded = load_roles(roles, roles_path(inv.path))
    renderer = Renderer()
    target = inv.node(node)
    context = node_vars(inv, target, loaded, environ or {})
    tasks = {r.name: render_tasks(r, r.tasks, context, renderer) for r in loaded}
    handlers = {r.name: render_tasks(r, r.handlers, context, renderer) for r in loaded}
    return plan_node(loaded, tasks, handlers, context, facts or good_facts(), renderer=renderer,
                     absent=absent, secrets=[context["hf_token"]])


def put(changes, path) -> str:
    for change in changes:
        for action in change.actions:
            if isinstance(action, Put) and action.path == path:
                return action.content.decode()
    raise AssertionError(f"no write of {path}")


def env_of(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def test_the_plays_list_every_role_folder_once():
    folders = sorted(p.name for p in ROLES_DIR.iterdir()
                     if p.is_dir() and p.name != "__pycache__")  # roles/ is a package
    plays = sorted(p.name for p in ROLES_DIR.glob("*.yml"))
    assert plays == ["site.yml", "watchdog.yml"]
    listed = [role for play in plays for role in site_roles(play=play)]
    assert sorted(listed) == folders
    assert site_roles()[0] == "clock_cap" and site_roles(play="watchdog.yml") == (
        "watchdog_files", "watchdog")
    assert [r.name for r in load_roles()] == list(site_roles())
    assert [r.name for r in load_roles(play="watchdog.yml")] == ["watchdog_files", "watchdog"]


def test_a_role_of_another_play_is_not_provisions():
    with pytest.raises(UsageError, match="unknown role 'watchdog'"):
        load_roles("watchdog")


def test_an_inventorys_own_role_replaces_the_shipped_one_whole(tmp_path):
    import shutil
    inv = Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "inv"))
    own = inv / ".sparkrack" / "roles" / "nccl_env"
    shutil.copytree(ROLES_DIR / "nccl_env", own)
    template = own / "templates" / "nccl.env.j2"
    template.write_text("# this site's own nccl.env\n" + template.read_text())
    search = roles_path(inv)
    assert search == (inv / ".sparkrack" / "roles", ROLES_DIR)
    assert [r.path for r in load_roles("nccl_env,clock_cap", search)] == [
        ROLES_DIR / "clock_cap", own]
    text = put(planned(inventory=inv), "/etc/sparkrack/nccl.env")
    assert text.startswith("# this site's own nccl.env\n") and "NCCL_IB_HCA=" in text


def test_an_inventorys_own_site_yml_lists_its_roles(tmp_path):
    import shutil
    inv = Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "inv"))
    (inv / ".sparkrack" / "roles").mkdir(parents=True)
    (inv / ".sparkrack" / "roles" / "site.yml").write_text("roles: [clock_cap, extra]\n")
    assert site_roles(roles_path(inv)) == ("clock_cap", "extra")
    with pytest.raises(RoleError, match=r"^extra: not in .*/\.sparkrack/roles or .*/roles"):
        load_roles(None, roles_path(inv))


def test_role_selection_keeps_site_order_and_refuses_unknown():
    assert [r.name for r in load_roles("engine_env,clock_cap")] == ["clock_cap", "engine_env"]
    with pytest.raises(UsageError, match="unknown role 'nope'"):
        load_roles("nope")


def test_clock_cap_unit_is_the_one_status_reads():
    changes = planned("clock_cap")
    unit = put(changes, f"/etc/systemd/system/{CLOCK_CAP_UNIT}")
    ini = configparser.ConfigParser(strict=False, interpolation=None)
    ini.read_string(unit)
    assert ini["Unit"]["After"] == "nvidia-persistenced.service"
    assert dict(ini["Service"]) == {"type": "oneshot", "remainafterexit": "yes",
                                    "execstart": "nvidia-smi -lgc 0,2200",
                                    "execstartpost": "-/usr/local/sbin/sparkrack-clock-cap "
                                                     "mark 2200",
                                    "execstop": "nvidia-smi -rgc"}
    assert ini["Install"]["WantedBy"] == "multi-user.target"
    systemd = next(c for c in changes if c.module == "systemd" and not c.handler)
    assert [a.argv for a in systemd.actions] == [
        ("systemctl", "daemon-reload"), ("systemctl", "enable", CLOCK_CAP_UNIT),
        ("systemctl", "start", CLOCK_CAP_UNIT)]


def test_nccl_env_probed_index_and_the_field_settings():
    env = env_of(put(planned(facts=good_facts(5, 5)), "/etc/sparkrack/nccl.env"))
    assert env == {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "5",
                   "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
                   "TP_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_DISABLE": "0",
                   "SGLANG_HOST_IP": "10.77.3.11", "VLLM_HOST_IP": "10.77.3.11",
                   "NCCL_CROSS_NIC": "1", "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0",
                   "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def test_nccl_env_falls_back_to_the_inventory_index():
    no_v4 = HcaFacts(present=True, state="4: ACTIVE", types={1: "RoCE v2"}, gids={1: LL})
    facts = ProvisionFacts(roce=RoceFacts({"rocep1s0f0": no_v4, "roceP2p1s0f0": no_v4}),
                      netdevs=("enp1s0f0np0",))
    text = put(planned(facts=facts), "/etc/sparkrack/nccl.env")
    assert env_of(text)["NCCL_IB_GID_INDEX"] == "3" and "fallback: no RoCE v2" in text


def test_a_nodes_own_index_overrides_the_probe(tmp_path):
    inv = tmp_path / "inv"
    import shutil
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "spark-02.yml").write_text("nccl_ib_gid_index: 7\n")
    text = put(planned(facts=good_facts(5, 5, node=12), inventory=inv, node="spark-02"),
               "/etc/sparkrack/nccl.env")
    assert env_of(text)["NCCL_IB_GID_INDEX"] == "7" and "host_vars" in text
    other = put(planned(facts=good_facts(5, 5, node=13), inventory=inv, node="spark-03"),
                "/etc/sparkrack/nccl.env")
    assert env_of(other)["NCCL_IB_GID_INDEX"] == "5"


def test_one_hca_entry_misnamed_warns_naming_it_and_writes_the_inventorys_file():
    """Issue 56: NCCL skips an NCCL_IB_HCA entry that matches no device without an error;
    provisioning writes what the inventory says and warns naming the node, the entry and
    the devices it has. None present (no RoCE at all): the role fails."""
    devices = {name: Function(name, (netdev,), "4: ACTIVE" if name.endswith("f0") else "1: DOWN")
               for name, netdev in (("rocep1s0f0", "enp1s0f0np0"), ("rocep1s0f1", "enp1s0f1np1"),
                                    ("roceP2p1s0f0", "enP2p1s0f0np0"),
                                    ("roceP2p1s0f1", "enP2p1s0f1np1"))}
    facts = ProvisionFacts(roce=RoceFacts({"rocep1s0f0": hca(3), "roceP2p1s0f0": HcaFacts()}),
                           netdevs=("enp1s0f0np0",), functions=devices)
    changes = planned(facts=facts)
    assert (changes[0].status, changes[0].task) == ("ok", "RoCE HCAs present")
    assert changes[0].warning == (
        "HCA roceP2p1s0f0 of nccl_ib_hca is not on spark-01 (its RDMA devices: rocep1s0f0, "
        "rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1): NCCL skips an entry that matches no device "
        "without an error and runs on the rails left (rocep1s0f0: 1 of 2); nccl.env is "
        "written as the inventory says, and `invoke up` refuses spark-01 until nccl_ib_hca in "
        "host_vars/spark-01.yml names its HCAs, or starts it with --allow-degraded")
    assert env_of(put(changes, "/etc/sparkrack/nccl.env"))["NCCL_IB_HCA"] == \
        "rocep1s0f0,roceP2p1s0f0"
    none = ProvisionFacts(roce=RoceFacts({"rocep1s0f0": HcaFacts(), "roceP2p1s0f0": HcaFacts()}),
                          netdevs=("enp1s0f0np0",))
    changes = planned(facts=none)
    assert changes[0].status == "failed"
    assert changes[0].summary.startswith("HCA rocep1s0f0, roceP2p1s0f0 missing under "
                                         "/sys/class/infiniband")
    assert all(c.status == "skipped" for c in changes[1:])


def test_a_down_hca_fails_the_role_naming_it():
    down = HcaFacts(present=True, state="1: DOWN", netdevs=("enP2p1s0f0np0",),
                    types=hca(3).types, gids=hca(3).gids)
    facts = ProvisionFacts(roce=RoceFacts({"rocep1s0f0": hca(3), "roceP2p1s0f0": down}),
                      netdevs=("enp1s0f0np0",))
    by_name = {c.task: c for c in planned(facts=facts)}
    change = by_name["RoCE HCA ports active"]
    assert change.status == "failed"
    assert change.summary.startswith("HCA roceP2p1s0f0 port is not ACTIVE")
    assert by_name["NCCL environment for the engines"].status == "skipped"


def port_1_cabling() -> dict[str, Function]:
    """spark-04 recabled to port 1: its port-0 functions down, port 1's both up."""
    return {name: Function(name, (netdev,), "4: ACTIVE" if name.endswith("f1") else "1: DOWN")
            for name, netdev in (("rocep1s0f0", "enp1s0f0np0"), ("roceP2p1s0f0", "enP2p1s0f0np0"),
                                 ("rocep1s0f1", "enp1s0f1np1"), ("roceP2p1s0f1", "enP2p1s0f1np1"))}


def test_a_node_cabled_on_the_other_port_is_named_with_the_values_to_set():
    down = [HcaFacts(present=True, state="1: DOWN", netdevs=(n,), types={}, gids={})
            for n in ("enp1s0f0np0", "enP2p1s0f0np0")]
    facts = ProvisionFacts(roce=RoceFacts(dict(zip(("rocep1s0f0", "roceP2p1s0f0"), down, strict=False))),
                           netdevs=("enP7s7", "enp1s0f0np0", "enp1s0f1np1"),
                           functions=port_1_cabling())
    by_name = {c.task: c for c in planned(facts=facts, node="spark-04")}
    change = by_name["RoCE HCA ports active"]
    assert change.status == "failed"
    assert change.summary == (
        "HCA rocep1s0f0, roceP2p1s0f0 port is not ACTIVE (NCCL_IB_HCA lists "
        "rocep1s0f0,roceP2p1s0f0; NCCL would skip it in silence and run on the rails "
        "left, at a fraction of the bandwidth, or over TCP with none left): up on spark-04: "
        "rocep1s0f1 "
        "(enp1s0f1np1); roceP2p1s0f1 (enP2p1s0f1np1); if it is cabled there, set in "
        "host_vars/spark-04.yml: nccl_ib_hca: [rocep1s0f1, roceP2p1s0f1], nccl_socket_ifname: "
        "enp1s0f1np1 (`ibdev2netdev` shows the link states)")


def test_a_socket_interface_without_a_cable_is_named():
    """nccl_ib_hca moved to port 1 in host_vars, nccl_socket_ifname left on port 0."""
    facts = dataclasses.replace(good_facts(), functions=port_1_cabling())
    change = {c.task: c for c in planned(facts=facts)}["socket interface cabled"]
    assert change.status == "failed"
    assert change.summary.startswith("nccl_socket_ifname enp1s0f0np0 is a RoCE function whose "
                                     "port is down")
    assert "up on spark-01: rocep1s0f1 (enp1s0f1np1)" in change.summary


def test_hcas_with_different_indexes_fail():
    change = {c.task: c for c in planned(facts=good_facts(3, 5))}[
        "one RoCE v2 GID index for every HCA"]
    assert change.status == "failed" and "different indexes" in change.summary


def test_missing_socket_interface_fails():
    facts = ProvisionFacts(roce=good_facts().roce, netdevs=("lo", "eth0"))
    change = {c.task: c for c in planned(facts=facts)}["socket interface present"]
    assert change.status == "failed"
    assert "enp1s0f0np0 is not an interface of this node (it has lo, eth0)" in change.summary


TOKEN_FILE = "/etc/sparkrack/hf/token"


def test_engine_env_puts_the_token_in_a_file_of_its_own_never_in_the_env():
    """Issue 46 item 8: HF_TOKEN in a rank's environment shows in `docker inspect`. The env
    files name the token file (HF_TOKEN_PATH, where huggingface_hub reads it); the token
    is in that file alone: 0600 in a 0700 folder of sparkrack's."""
    token = "hf_abcdefSECRET123"
    changes = planned("engine_env", environ={"HF_TOKEN": token})
    sglang = env_of(put(changes, "/etc/sparkrack/sglang.env"))
    assert sglang == {"SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION": "0.01",
                      "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
                      "HF_TOKEN_PATH": TOKEN_FILE}
    assert env_of(put(changes, "/etc/sparkrack/vllm.env")) == {"HF_TOKEN_PATH": TOKEN_FILE}
    assert put(changes, TOKEN_FILE) == token  # as huggingface_hub's login writes it
    modes = {a.path: a.mode for c in changes for a in c.actions if isinstance(a, Put)}
    assert modes == {"/etc/sparkrack/sglang.env": 0o600, "/etc/sparkrack/vllm.env": 0o600,
                     TOKEN_FILE: 0o600}
    folder = next(c for c in changes if c.summary.startswith("/etc/sparkrack/hf"))
    assert [a.argv for a in folder.actions] == [("mkdir", "-p", "-m", "0700", "--",
                                                 "/etc/sparkrack/hf")]
    assert all(token not in c.summary + c.diff for c in changes)


def test_engine_env_without_token_has_none_and_removes_an_old_one():
    """Provisioning without HF_TOKEN leaves no token on the node (as the env file carried
    none before); unprovision removes the file and its folder."""
    changes = planned("engine_env")
    assert env_of(put(changes, "/etc/sparkrack/sglang.env"))["HF_TOKEN_PATH"] == TOKEN_FILE
    assert not [a for c in changes for a in c.actions
                if isinstance(a, Put) and a.path == TOKEN_FILE]
    old = good_facts()
    old = dataclasses.replace(old, files={TOKEN_FILE: FileFacts(
        exists=True, type="file", mode="600", owner="root", group="root", size=10,
        content=b"hf_oldone\n")})
    removal = [c for c in planned("engine_env", facts=old) if c.summary == f"{TOKEN_FILE}: remove"]
    assert len(removal) == 1 and "hf_oldone" not in removal[0].diff
    gone = planned("engine_env", facts=old, absent=True, environ={"HF_TOKEN": "hf_x"})
    assert f"{TOKEN_FILE}: remove" in [c.summary for c in gone]


def test_a_token_left_in_an_env_file_is_drift_that_up_refuses():
    """An engine file provision wrote before the token moved to its file holds HF_TOKEN: the
    gate's read calls it drift (it used to judge the file with the token it held, and
    passed it to every rank's environment), masked."""
    from sparkrack.provision.envfiles import EnvFiles

    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    written = planned("nccl_env,engine_env")
    files = {}
    for path, mode in (("/etc/sparkrack/nccl.env", "644"), ("/etc/sparkrack/sglang.env", "600")):
        text = put(written, path).encode()
        text += b"HF_TOKEN=hf_legacyvalue\n" if path.endswith("sglang.env") else b""
        files[path] = FileFacts(exists=True, type="file", mode=mode, owner="root",
                                group="root", size=len(text),
                                sha256=hashlib.sha256(text).hexdigest(), content=text)
    env = EnvFiles(inventory, "sglang").read(inventory.node("spark-01"),
                                            dataclasses.replace(good_facts(), files=files))
    assert env.problems == ("/etc/sparkrack/sglang.env is not what provision would write now: "
                            "HF_TOKEN=*** is not provision's",)


def test_node_limits_values():
    changes = planned("node_limits")
    limits = put(changes, "/etc/security/limits.d/90-sparkrack.conf")
    assert "root  hard  nofile   1048576" in limits and "*     hard  memlock  unlimited" in limits
    dropin = put(changes, "/etc/systemd/system/containerd.service.d/90-sparkrack-limits.conf")
    assert "LimitMEMLOCK=infinity\nLimitNOFILE=1048576\n" in dropin
    assert changes[-1].handler and changes[-1].actions[0].argv == (
        "systemctl", "restart", "containerd.service")


def test_engine_images_take_the_rehearsal_tars_on_the_rehearsal_rack():
    for inventory, tar in (("inventory/rehearsal",
                            "/var/lib/sparkrack/rehearsal/images/sglang.tar"),
                           ("inventory/rack", "")):
        inv = load_inventory(REPO / inventory)
        role = load_roles("engine_images")
        tasks = render_tasks(role[0], role[0].tasks, node_vars(inv, inv.head, role, {}),
                             Renderer())
        first = tasks[0]
        assert (first.params["name"], first.params["source_tar"]) == (
            inv.vars.images["sglang"], tar)


def write(tmp_path, text):
    (tmp_path / "r" / "tasks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "r" / "tasks" / "main.yml").write_text(text)
    return tmp_path / "r"


@pytest.mark.parametrize("text, message", [
    ("- name: x\n  fetch: {src: a}\n", "unknown key 'fetch'"),
    ("- name: x\n  file: {path: /a, colour: red}\n", "file: unknown parameter 'colour'"),
    ("- name: x\n  template: {src: a}\n", "template: missing dest"),
    ("- name: x\n  command: {argv: [rm, -rf, /]}\n", "needs a guard"),
    ("- file: {path: /a}\n", "every task needs a name"),
    ("- name: x\n  file: {path: /a}\n  notify: nope\n", "notifies unknown handler 'nope'"),
    ("- name: x\n  file: {path: /a}\n  assert: {that: x}\n", "needs exactly one module"),
    ("[oops\n", "YAML syntax error"),
])
def test_role_file_mistakes_name_the_task(tmp_path, text, message):
    with pytest.raises(RoleError, match=message.replace("(", r"\(")):
        load_role(write(tmp_path, text))


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes of YAML whose aliases expand to 9**levels values."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_role_file_of_nested_aliases_is_refused_at_once(tmp_path):
    role = write(tmp_path, "- name: x\n  file: {path: /a}\n")
    (role / "defaults").mkdir()
    (role / "defaults" / "main.yml").write_text(alias_bomb())
    began = time.monotonic()
    with pytest.raises(RoleError) as refused:
        load_role(role)
    assert time.monotonic() - began < 3.0
    assert refused.value.line().startswith(
        f"{role}/defaults/main.yml:6: YAML aliases expand to over 100,000 values")
    assert "\n" not in refused.value.line()


def test_an_alias_bomb_in_an_inventory_role_fails_fast(tmp_path):
    """The review's reproduction: an inventory's override of role engine_env whose
    defaults are 592 bytes of nested aliases made `plan --offline` take 67 s and 585 MB.
    `plan` reads no role now (the env files are judged in sparkrack/engineenv,
    test_envdrift.py); the roles load when `provision` starts, before any node is asked,
    and refuse it there."""
    import resource
    import shutil
    import subprocess
    import sys

    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    role = inv / ".sparkrack" / "roles" / "engine_env"
    shutil.copytree(ROLES_DIR / "engine_env", role)
    defaults = role / "defaults" / "main.yml"
    defaults.parent.mkdir()
    defaults.write_text(alias_bomb())

    def limit_memory() -> None:  # a run that expands the aliases dies here, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), "provision",
                           "--check", "--role", "engine_env", "-i", str(inv)],
                          capture_output=True, text=True, timeout=60, preexec_fn=limit_memory)
    assert time.monotonic() - began < 20
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {defaults}:")
    assert "YAML aliases expand to over 100,000 values" in done.stderr
    assert "Traceback" not in done.stderr


def test_template_outside_the_role_is_refused(tmp_path):
    role = load_role(write(tmp_path, "- name: x\n  template: {src: ../../etc/passwd, dest: /a}\n"))
    renderer = Renderer()
    tasks = render_tasks(role, role.tasks, {}, renderer)
    with pytest.raises(RoleError, match="outside templates"):
        plan_node([role], {"r": tasks}, {}, {}, ProvisionFacts(), renderer=renderer)


ESCAPES = ("cycler.__init__.__globals__.os.system('touch {marker}')",
           "lipsum.__globals__['os'].popen('touch {marker}').read()",
           "''.__class__.__mro__[1].__subclasses__()",
           "namespace.__init__.__globals__")


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_role_template_cannot_reach_python(tmp_path, escape):
    """Issue 46 item 9: a role (the inventory's own, planted from elsewhere) is rendered on
    the operator's machine, as root: its templates, params and `when`s are sandboxed
    (Jinja2's SandboxedEnvironment), so an expression reaching Python's internals fails as
    the task's error and runs nothing."""
    marker = tmp_path / "ran"
    expression = escape.format(marker=marker)
    role = load_role(write(tmp_path, "- name: x\n  template: {src: t.j2, dest: /a}\n"))
    (role.path / "templates").mkdir()
    (role.path / "templates" / "t.j2").write_text(f"{{{{ {expression} }}}}\n")
    renderer = Renderer()
    with pytest.raises(RenderError, match="unsafe|not safely callable|'lipsum' is undefined"):
        renderer.template(role, "t.j2", {})
    with pytest.raises(RenderError, match="unsafe|not safely callable|'lipsum' is undefined"):
        renderer.value(f"x {{{{ {expression} }}}}", {})
    with pytest.raises(RenderError, match="unsafe|not safely callable|'lipsum' is undefined"):
        renderer.expr(expression, {})
    assert not marker.exists()


# CVE-2025-27516 (GHSA-cpwx-vrp4-4pq7): before Jinja2 3.1.6, |attr gave a string's plain
# str.format, which the sandbox did not see; its fields then read any attribute
LEAKS = ('"{0.__init__.__globals__[os].environ}"|attr("format")(cycler)',
         '"{0.__init__.__globals__[os].environ[SPARKRACK_PDU_AUTH_KEY]}"|attr("format")(cycler)',
         '"{a.__init__.__globals__[os].environ[HF_TOKEN]}"|attr("format_map")({"a": cycler})')


@pytest.mark.parametrize("leak", LEAKS)
def test_the_attr_filter_cannot_reach_the_environment_through_format(tmp_path, monkeypatch,
                                                                     leak):
    """Issue 53 item 3: with Jinja2 3.1.5 (which `jinja2>=3.1` admitted) a role value
    printed the process's environment, HF_TOKEN and the PDU's keys included."""
    monkeypatch.setenv("HF_TOKEN", "hf_LeakedLeakedLeaked")
    monkeypatch.setenv("SPARKRACK_PDU_AUTH_KEY", "pdu-auth-leaked")
    role = load_role(write(tmp_path, "- name: x\n  template: {src: t.j2, dest: /a}\n"))
    (role.path / "templates").mkdir()
    (role.path / "templates" / "t.j2").write_text(f"{{{{ {leak} }}}}\n")
    renderer = Renderer()
    for render in (lambda: renderer.template(role, "t.j2", {}),
                   lambda: renderer.value(f"x {{{{ {leak} }}}}", {}),
                   lambda: renderer.expr(leak, {})):
        with pytest.raises(RenderError, match="unsafe") as refused:
            render()
        assert "Leaked" not in str(refused.value) and "leaked" not in str(refused.value)


def test_an_inventory_role_planting_a_template_escape_fails_its_task(tmp_path):
    import shutil
    inv = Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "inv"))
    own = inv / ".sparkrack" / "roles" / "nccl_env"
    shutil.copytree(ROLES_DIR / "nccl_env", own)
    marker = tmp_path / "ran"
    (own / "templates" / "nccl.env.j2").write_text(
        f"{{{{ {ESCAPES[0].format(marker=marker)} }}}}\n")
    failed = [c for c in planned(inventory=inv) if c.status == "failed"]
    assert len(failed) == 1 and "unsafe" in failed[0].summary, failed
    assert not marker.exists()


def test_every_shipped_role_renders_in_the_sandbox():
    """The shipped templates need nothing the sandbox refuses: provision's plan on the
    rehearsal inventory has no failed task (engine_images left out: its images have no
    source here)."""
    changes = planned(",".join(r for r in site_roles() if r != "engine_images"))
    assert changes and [(c.task, c.summary) for c in changes if c.status == "failed"] == []


def test_lone_expression_keeps_its_type():
    renderer = Renderer()
    assert renderer.value("{{ hcas }}", {"hcas": ["a", "b"]}) == ["a", "b"]
    assert renderer.value("x-{{ n }}", {"n": 3}) == "x-3"
    assert renderer.value({"k": ["{{ n + 1 }}"]}, {"n": 3}) == {"k": [4]}


def test_the_roles_are_the_top_level_folder():
    """roles/ at the checkout's top, found as the package sparkrack.roles (editable here)."""
    assert ROLES_DIR == REPO / "roles"
    assert (ROLES_DIR / "site.yml").is_file() and not (REPO / "sparkrack" / "data" / "roles").exists()


def test_a_copy_run_without_installing_names_the_fix(tmp_path):
    """sparkrack/ copied and run as files, without pip: the roles package is not there; one
    line names the fix (python -S: not even this venv's editable install is seen)."""
    import shutil
    import subprocess
    import sys
    shutil.copytree(REPO / "sparkrack", tmp_path / "sparkrack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from sparkrack.data import shipped\n"
             "from sparkrack.core.errors import UsageError\n"
             "print(shipped('engines').relative_to(sys.argv[1]))\n"
             "try: shipped('roles')\n"
             "except UsageError as error: print(error.line()); sys.exit(error.exit_code)\n")
    done = subprocess.run([sys.executable, "-S", "-c", probe, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout.splitlines() == [
        "sparkrack/data/engines",
        "sparkrack's roles are not installed: sparkrack.roles is missing (pip install -e . in "
        "the checkout, or install the wheel)"]


NETPLAN = "/etc/netplan/60-sparkrack-fabric.yaml"


def fabric_dropin(**kwargs) -> tuple[dict, int]:
    import yaml

    for change in planned(roles="fabric", **kwargs):
        for action in change.actions:
            if isinstance(action, Put) and action.path == NETPLAN:
                return yaml.safe_load(action.content)["network"]["ethernets"], action.mode
    raise AssertionError(f"no write of {NETPLAN}")


def test_fabric_writes_the_cabled_ports_addresses_and_mtu_as_a_netplan_drop_in():
    ethernets, mode = fabric_dropin(node="spark-03")
    assert ethernets == {"enp1s0f0np0": {"mtu": 9000, "addresses": ["10.77.3.13/24"]},
                         "enP2p1s0f0np0": {"mtu": 9000, "addresses": ["10.77.4.13/24"]}}
    assert mode == 0o600  # netplan warns about a drop-in others can read


def test_fabric_refuses_a_renderer_that_does_not_run_before_it_changes_anything():
    """NVIDIA's guide names NetworkManager; a node that does not run it would lose the
    fabric's addresses at its next boot: one line naming the node, the file and the fix."""
    from sparkrack.facts.netplan import NetplanFile
    from sparkrack.facts.systemd import UnitFacts

    cx7 = NetplanFile("/etc/netplan/40-cx7.yaml",
                      "network:\n  version: 2\n  renderer: NetworkManager\n")
    off = UnitFacts(load="loaded", active="inactive", enabled="disabled")
    facts = dataclasses.replace(good_facts(), netplan=(cx7,),
                                units={"NetworkManager.service": off})
    changes = planned(roles="fabric", facts=facts, node="spark-03")
    [failed] = [c for c in changes if c.status == "failed"]
    assert failed.summary.startswith(
        "spark-03: /etc/netplan/40-cx7.yaml renders enp1s0f0np0 with NetworkManager, whose "
        "NetworkManager.service is loaded, inactive, disabled")
    assert not any(c.actions for c in changes)
    running = UnitFacts(load="loaded", active="active", enabled="enabled")
    facts = dataclasses.replace(facts, units={"NetworkManager.service": running})
    changes = planned(roles="fabric", facts=facts, node="spark-03")
    assert not [c for c in changes if c.status == "failed"]


def test_fabric_names_networkmanager_for_the_netdevs_it_renders_so_the_take_over_keeps_it():
    """40-cx7.yaml names NetworkManager and is moved aside by the take-over: the drop-in
    carries it per netdev; under networkd it names none (netplan's default)."""
    import yaml

    from sparkrack.facts.netplan import NetplanFile
    from sparkrack.facts.systemd import UnitFacts

    cx7 = NetplanFile("/etc/netplan/40-cx7.yaml",
                      "network:\n  version: 2\n  renderer: NetworkManager\n")
    running = UnitFacts(load="loaded", active="active", enabled="enabled")
    units = {"NetworkManager.service": running, "systemd-networkd.service": running}
    for files, want in (((cx7,), {"renderer": "NetworkManager"}), ((), {})):
        facts = dataclasses.replace(good_facts(), netplan=files, units=units)
        text = put(planned(roles="fabric", facts=facts, node="spark-03"), NETPLAN)
        ethernets = yaml.safe_load(text)["network"]["ethernets"]
        assert ethernets == {"enp1s0f0np0": {"mtu": 9000, "addresses": ["10.77.3.13/24"], **want},
                             "enP2p1s0f0np0": {"mtu": 9000, "addresses": ["10.77.4.13/24"],
                                               **want}}


def test_fabric_follows_a_node_cabled_on_the_other_port(tmp_path):
    import shutil
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "spark-04.yml").write_text(
        "nccl_ib_hca: [rocep1s0f1, roceP2p1s0f1]\nnccl_socket_ifname: enp1s0f1np1\n")
    all_vars = inv / "group_vars" / "all.yml"
    all_vars.write_text(all_vars.read_text() + "fabric_prefix: 16\n")
    ethernets, _ = fabric_dropin(inventory=inv, node="spark-04")
    assert ethernets == {"enp1s0f1np1": {"mtu": 9000, "addresses": ["10.77.3.14/16"]},
                         "enP2p1s0f1np1": {"mtu": 9000, "addresses": ["10.77.4.14/16"]}}


def test_fabric_without_fabric_addresses_sets_only_the_mtu(tmp_path):
    """roce_addr left at the management address, no twin address: the netdevs get the
    jumbo MTU and no address (the management address stays where it is)."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    sparks:\n      hosts:\n"
        "        spark-01: {ansible_host: 192.0.2.11, rank: 0}\n  vars: {tp_size: 1}\n")
    ethernets, _ = fabric_dropin(inventory=inv)
    assert ethernets == {"enp1s0f0np0": {"mtu": 9000}, "enP2p1s0f0np0": {"mtu": 9000}}


def test_nccl_over_the_management_port_keeps_it_out_of_the_fabric_and_advertises_it(
        tmp_path):
    """NCCL's socket bootstrap over the management port, as NVIDIA's scripts run it
    (nccl_socket_ifname: enP7s7): enP7s7 (10 GbE at 1500) is in no drop-in, the cabled
    port's functions keep roce_addr and roce_twin_addr at the fabric MTU, and the ranks
    advertise the address they meet at, the management one."""
    import shutil
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "rehearsal", inv)
    all_vars = inv / "group_vars" / "all.yml"
    all_vars.write_text(all_vars.read_text().replace("nccl_socket_ifname: enp1s0f0np0",
                                                     "nccl_socket_ifname: enP7s7"))
    ethernets, _ = fabric_dropin(inventory=inv, node="spark-01")
    assert ethernets == {"enp1s0f0np0": {"mtu": 9000, "addresses": ["10.77.3.11/24"]},
                         "enP2p1s0f0np0": {"mtu": 9000, "addresses": ["10.77.4.11/24"]}}
    facts = ProvisionFacts(roce=good_facts().roce, netdevs=("lo", "enP7s7", "enp1s0f0np0",
                                                            "enP2p1s0f0np0"), images={})
    env = env_of(put(planned(inventory=inv, facts=facts), "/etc/sparkrack/nccl.env"))
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enP7s7"
    assert env["SGLANG_HOST_IP"] == env["VLLM_HOST_IP"] == "10.77.1.11"
    assert env_of(put(planned(facts=good_facts()), "/etc/sparkrack/nccl.env"))[
        "SGLANG_HOST_IP"] == "10.77.3.11"


def test_a_sparks_rdma_functions_name_their_netdevs():
    from sparkrack.facts.roce import netdev_of

    assert [netdev_of(h) for h in ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0",
                                   "roceP2p1s0f1", "mlx5_0")] == [
        "enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1", None]


def test_a_changed_fabric_drop_in_is_applied_by_its_handler_though_the_old_one_was_in_force():
    """Recabled to the other port, the old drop-in's check passes (its port has no cable):
    only the handler, notified by the new drop-in, applies it, and waits until it holds."""
    from sparkrack.facts.provision import ProvisionFacts

    guard = ("/usr/local/sbin/sparkrack-fabric-in-force", NETPLAN)
    changes = planned(roles="fabric", facts=ProvisionFacts(guards={guard: 0}))
    runs = [(c.task, c.handler, [a.describe() for a in c.actions])
            for c in changes if c.changed and "--take-over" in c.summary]
    assert runs == [("apply the fabric config", True,
                     [f"{guard[0]} --take-over {NETPLAN}",
                      "wait up to 20 s for the guard to hold"])], runs


# --- the clock lock's script (role clock_cap): what says a lock is gone ------------------


@pytest.fixture
def lock_script(tmp_path):
    """The role's script rendered with its marker in tmp_path, a fake nvidia-smi that logs
    its arguments, and a burn record path: (run(*args) -> CompletedProcess, paths)."""
    import json
    import subprocess

    role = load_role(ROLES_DIR / "clock_cap")
    script = tmp_path / "sparkrack-clock-cap"
    script.write_text(Renderer().template(role, "sparkrack-clock-cap.py.j2", {
        "clock_cap_marker": str(tmp_path / "run" / "clock-cap.json")}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    record = tmp_path / "burn.json"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    def burned(verdict, boot_id=boot):
        record.write_text(json.dumps({"verdict": verdict, "boot_id": boot_id, "cap_mhz": 2200,
                                      "max_sm_mhz": 2477}))

    def run(*args):
        return subprocess.run(["python3", str(script), *args], capture_output=True, text=True,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=20)

    return run, burned, record, bin_dir / "calls"


def test_the_lock_is_gone_only_where_a_burn_of_this_boot_found_it_over_the_cap(lock_script):
    run, burned, record, _ = lock_script
    assert run("in-force", "2200", str(record)).returncode == 0  # no burn: nothing says so
    burned("ok")
    assert run("in-force", "2200", str(record)).returncode == 0
    burned("UNCAPPED", boot_id="another-boot")
    assert run("in-force", "2200", str(record)).returncode == 0  # a reboot locked it again
    burned("UNCAPPED")
    gone = run("in-force", "2200", str(record))
    assert gone.returncode == 1
    assert re.fullmatch(r"the lock is gone: the burn at \d\d:\d\d:\d\d found 2477 MHz under "
                        r"load, over the 2200 MHz cap \(a driver reload, a GPU reset or "
                        r"nvidia-smi -rgc drops it\): put it back\n", gone.stdout), gone.stdout


def test_lock_puts_it_back_and_then_it_is_in_force(lock_script):
    run, burned, record, calls = lock_script
    burned("UNCAPPED")
    assert run("lock", "2200", str(record)).returncode == 0
    assert calls.read_text() == "-lgc 0,2200\n"
    assert run("in-force", "2200", str(record)).returncode == 0  # locked since that burn
    time.sleep(0.05)  # file times move in clock ticks (a few ms)
    burned("UNCAPPED")  # a later burn found it gone again
    assert run("in-force", "2200", str(record)).returncode == 1


def test_the_units_start_notes_the_lock_too(lock_script):
    run, burned, record, calls = lock_script
    burned("UNCAPPED")
    assert run("mark", "2200").returncode == 0  # ExecStartPost after a unit restart
    assert run("in-force", "2200", str(record)).returncode == 0
    assert not calls.exists()
