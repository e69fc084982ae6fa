"""The engine environment computed in Python (sparkrack/engineenv): the NCCL GID index a node
uses and why, every variable's source, and provision's read-back taking those sources from
the computation, never from the files' `# source of` comments."""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import shutil
from pathlib import Path

import pytest

from sparkrack.engineenv import EngineEnv, gid_index, inventory_views
from sparkrack.facts.files import FileFacts
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.roce import HcaFacts, RoceFacts
from sparkrack.inventory import load_inventory
from sparkrack.provision.envfiles import EnvFiles

REPO = Path(__file__).resolve().parents[3]
LL = "fe80:0000:0000:0000:ba3f:d2ff:fea2:1a04"
NCCL = "/etc/sparkrack/nccl.env"
PROBED_11 = "probed on the node (the RoCE v2 entry of 10.77.3.11, 10.77.4.11)"


def mapped(address: str) -> str:
    return ipaddress.IPv6Address(f"::ffff:{address}").exploded


def table(index: int, address: str, *others: str) -> HcaFacts:
    """An HCA whose RoCE v2 entry of address is at index (its v1 twin below it), link-local
    at 0/1 and other IPv4 addresses after it."""
    types = {0: "IB/RoCE v1", 1: "RoCE v2", index - 1: "IB/RoCE v1", index: "RoCE v2"}
    gids = {0: LL, 1: LL, index - 1: mapped(address), index: mapped(address)}
    for n, other in enumerate(others, 1):
        types[index + 2 * n - 1], types[index + 2 * n] = "IB/RoCE v1", "RoCE v2"
        gids[index + 2 * n - 1] = gids[index + 2 * n] = mapped(other)
    return HcaFacts(present=True, state="4: ACTIVE", netdevs=("enp1s0f0np0",), types=types,
                    gids=gids)


def roce(a: int, b: int, node: int = 11, *others: str) -> RoceFacts:
    """spark-NN's twins with their fabric addresses' entries at a and b."""
    return RoceFacts({"rocep1s0f0": table(a, f"10.77.3.{node}", *others),
                      "roceP2p1s0f0": table(b, f"10.77.4.{node}")})


@pytest.fixture
def rack():
    return load_inventory(REPO / "inventory" / "rehearsal")


@pytest.fixture
def own_rack(tmp_path):
    return Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rack"))


# --- The GID index and its source --------------------------------------------------------


def test_the_index_is_read_from_the_nodes_own_table(rack):
    """Two nodes whose tables differ (real units put the entry at 3, 5 or 6) each get their
    own index, said to be probed there, by address."""
    first = gid_index(rack.node("spark-01"), 3, roce(3, 3))
    assert (first.index, first.source, first.probed) == (3, PROBED_11, True)
    moved = gid_index(rack.node("spark-05"), 3, roce(6, 6, node=15))
    assert (moved.index, moved.probed, moved.conflict) == (6, True, {})
    assert moved.source == "probed on the node (the RoCE v2 entry of 10.77.3.15, 10.77.4.15)"


def test_the_inventorys_view_reads_no_table(rack):
    view = gid_index(rack.node("spark-02"), 3, None)
    assert (view.index, view.probed) == (3, False)
    assert view.source == ("inventory nccl_ib_gid_index (provision writes the index probed on "
                           "the node)")


def test_a_table_without_the_fabric_address_falls_back_naming_what_it_lacks(rack):
    no_v4 = HcaFacts(present=True, state="4: ACTIVE", types={1: "RoCE v2"}, gids={1: LL})
    found = gid_index(rack.node("spark-01"), 3, RoceFacts({"rocep1s0f0": no_v4,
                                                          "roceP2p1s0f0": no_v4}))
    assert (found.index, found.probed) == (3, False)
    assert found.source == ("inventory nccl_ib_gid_index (fallback: no RoCE v2 GID of "
                            "rocep1s0f0 (10.77.3.11), roceP2p1s0f0 (10.77.4.11))")


def test_hcas_at_different_indexes_are_a_conflict_unless_other_addresses_explain_it(rack):
    node = rack.node("spark-01")
    split = gid_index(node, 3, roce(3, 5))
    assert split.conflict == {"rocep1s0f0": 3, "roceP2p1s0f0": 5} and split.index == 3
    # another address in a table (another netplan file's): role fabric removes it first
    crowded = gid_index(node, 3, roce(3, 5, 11, "169.254.3.7"))
    assert crowded.conflict == {} and crowded.source.endswith(
        "; other IPv4 GIDs: 169.254.3.7 on rocep1s0f0")


def test_a_nodes_own_index_and_a_rack_that_does_not_probe_win_over_the_table(own_rack):
    (own_rack / "host_vars").mkdir()
    (own_rack / "host_vars" / "spark-02.yml").write_text("nccl_ib_gid_index: 7\n")
    rack = load_inventory(own_rack)
    own = gid_index(rack.node("spark-02"), 3, roce(3, 5, node=12))
    assert (own.index, own.source, own.conflict) == (
        7, "host_vars nccl_ib_gid_index (this node's own)", {})
    vars_file = own_rack / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text().replace("nccl_ib_gid_probe: true",
                                                       "nccl_ib_gid_probe: false"))
    fixed = gid_index(load_inventory(own_rack).node("spark-03"), 3, roce(5, 5, node=13))
    assert (fixed.index, fixed.source) == (3, "inventory nccl_ib_gid_index "
                                              "(nccl_ib_gid_probe: false)")


# --- Every variable, with its source and file --------------------------------------------


def test_every_variable_has_its_value_source_and_file(rack):
    env = EngineEnv(rack, rack.node("spark-03"))
    found = env.variables("sglang", roce(5, 5, node=13))
    assert {k: v.value for k, v in found.items()} == {
        "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "5",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
        "TP_SOCKET_IFNAME": "enp1s0f0np0", "SGLANG_HOST_IP": "10.77.3.13",
        "VLLM_HOST_IP": "10.77.3.13", "NCCL_IB_DISABLE": "0", "NCCL_CROSS_NIC": "1",
        "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0", "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION": "0.01",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
        "HF_TOKEN_PATH": "/etc/sparkrack/hf/token"}
    assert {v.file for k, v in found.items() if k.startswith(("NCCL", "GLOO"))} == {NCCL}
    assert found["HF_TOKEN_PATH"].file == "/etc/sparkrack/sglang.env"
    assert found["SGLANG_HOST_IP"].source == "inventory roce_addr (this node's fabric address)"
    assert list(env.variables("vllm"))[-1] == "HF_TOKEN_PATH"
    assert "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION" not in env.variables("vllm")
    views = inventory_views(rack, "vllm")
    assert list(views) == [n.name for n in rack.nodes]
    assert views["spark-03"].vars["NCCL_IB_GID_INDEX"].value == "3"


# --- Read back: the sources are computed, the comments are prose --------------------------


def planned_files(inventory, node: str, facts: ProvisionFacts) -> dict[str, FileFacts]:
    """nccl.env and sglang.env as provision would write them on node from facts."""
    import sys
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_provision_roles import planned, put

    changes = planned("nccl_env,engine_env", facts=facts, inventory=inventory.path, node=node)
    found = {}
    for path, mode in ((NCCL, "644"), ("/etc/sparkrack/sglang.env", "600")):
        text = put(changes, path).encode()
        found[path] = FileFacts(exists=True, type="file", mode=mode, owner="root",
                                group="root", size=len(text),
                                sha256=hashlib.sha256(text).hexdigest(), content=text)
    return found


def gathered(gid: int) -> ProvisionFacts:
    return ProvisionFacts(roce=roce(gid, gid), netdevs=("lo", "enp1s0f0np0", "enP2p1s0f0np0"),
                          images={})


def own_nccl_role(own_rack: Path) -> None:
    """An inventory's own nccl_env and engine_env roles whose templates print the values
    only, without a `# source of` line."""
    from sparkrack.provision.roles import ROLES_DIR

    for role in ("nccl_env", "engine_env"):
        own = own_rack / ".sparkrack" / "roles" / role
        shutil.copytree(ROLES_DIR / role, own)
        for template in (own / "templates").glob("*.j2"):
            template.write_text("\n".join(line for line in template.read_text().splitlines()
                                          if "# source of" not in line and not
                                          line.startswith("# ")) + "\n")


def test_each_variable_read_back_has_the_source_computed_for_it(own_rack):
    """A node's files read back: the values are the node's, each source the one computed for
    it from the same facts, whatever comment the file carries (an inventory role that writes
    none included); a variable sparkrack does not define says so."""
    own_nccl_role(own_rack)
    rack = load_inventory(own_rack)
    facts = gathered(5)
    files = planned_files(rack, "spark-01", facts)
    assert b"# source of" not in files[NCCL].content
    text = files[NCCL].content + b"NCCL_ALGO=Ring\n"
    files[NCCL] = dataclasses.replace(files[NCCL], content=text, size=len(text))
    env = EnvFiles(rack, "sglang").read(rack.node("spark-01"),
                                        dataclasses.replace(facts, files=files))
    assert env.vars["NCCL_IB_GID_INDEX"].value == "5"
    assert env.vars["NCCL_IB_GID_INDEX"].source == PROBED_11
    assert env.vars["PYTORCH_CUDA_ALLOC_CONF"].source == (
        "role engine_env (the field report's 512K lane)")
    assert env.vars["NCCL_ALGO"].source == (f"{NCCL} (not sparkrack's: a hand edit or an "
                                             "inventory role's own line)")


def test_a_moved_gid_is_found_from_the_computation_not_the_comment(own_rack):
    """Written at 3, the node's table now at 5: `up` rewrites such a file itself when the
    index is the one thing that differs and it was read from the table. That is the
    computed GID's word, so an inventory role whose files carry no source line is mended
    too; a node's own index (host_vars) is never called moved."""
    own_nccl_role(own_rack)
    rack = load_inventory(own_rack)
    written = planned_files(rack, "spark-01", gathered(3))
    env = EnvFiles(rack, "sglang").read(rack.node("spark-01"),
                                        dataclasses.replace(gathered(5), files=written))
    assert env.gid_moved == (NCCL, "3", "5")
    assert env.problems == (f"{NCCL} is not what provision would write now: "
                            "NCCL_IB_GID_INDEX is 3, provision would write 5",)
    (own_rack / "host_vars").mkdir()
    (own_rack / "host_vars" / "spark-01.yml").write_text("nccl_ib_gid_index: 5\n")
    pinned = load_inventory(own_rack)
    env = EnvFiles(pinned, "sglang").read(pinned.node("spark-01"),
                                          dataclasses.replace(gathered(5), files=written))
    assert env.gid_moved is None and len(env.problems) == 1


def test_a_fabric_netdev_without_its_inventory_address_is_named_with_what_it_has():
    """Issue 56, item 5: NetworkManager dropped spark-03's fabric address (its table keeps
    only the link-local pair); another netdev carries a wrong one. Each is named with what
    it has, the inventory's address and no word of the env files' comments."""
    from sparkrack.facts.roce import lost_addresses, node_fabric

    fabric = node_fabric(load_inventory(REPO / "inventory" / "rehearsal").node("spark-03"))
    no_v4 = HcaFacts(present=True, state="4: ACTIVE", types={0: "IB/RoCE v1", 1: "RoCE v2"},
                     gids={0: LL, 1: LL})
    hcas = {"rocep1s0f0": no_v4, "roceP2p1s0f0": table(3, "10.77.4.99")}
    assert lost_addresses(fabric, hcas) == [
        "enp1s0f0np0 (rocep1s0f0) has no IPv4 address (only its IPv6 link-local one), not "
        "the inventory's 10.77.3.13",
        "enP2p1s0f0np0 (roceP2p1s0f0) has IPv4 10.77.4.99, not the inventory's 10.77.4.13"]
    assert lost_addresses(fabric, roce(3, 3, node=13).hcas) == []
    assert lost_addresses(fabric, {}) == []  # an HCA missing fails a check of its own
