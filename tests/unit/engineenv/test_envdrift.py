"""Env drift judged in engineenv/ (issue 55, item 4): `up`'s read of every node's env files
renders no provisioning role (the files' variables are compared with
`EngineEnv.variables`), the GID index is chosen once per node, and the checks role
nccl_env asserts are the ones `up` reads (engineenv/checks.py, one home)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

import pytest

from sparkrack.engineenv import compute
from sparkrack.engineenv.checks import NAMES
from sparkrack.inventory import load_inventory
from sparkrack.provision import renderer, roles
from sparkrack.provision.envfiles import EnvFiles

sys.path.insert(0, str(Path(__file__).parent))
from test_engineenv import NCCL, gathered, planned_files, roce  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def rack():
    return load_inventory(REPO / "inventory" / "rehearsal")


def node_facts(rack, name: str, index: int = 5):
    """A node's facts with its own fabric addresses' GIDs at index and its files as
    provision writes them."""
    facts = dataclasses.replace(gathered(index), roce=roce(index, index, int(name[-2:]) + 10))
    return dataclasses.replace(facts, files=planned_files(rack, name, facts))


def with_text(facts, path: str, text: bytes):
    """facts with the file at path holding text (its size and hash with it)."""
    found = dataclasses.replace(facts.files[path], content=text, size=len(text),
                                sha256=hashlib.sha256(text).hexdigest())
    return dataclasses.replace(facts, files={**facts.files, path: found})


def counting(monkeypatch, owner, name: str) -> list:
    """Every call of owner.name, recorded (the function still runs)."""
    calls: list = []
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_ups_read_of_the_env_files_renders_no_role_and_chooses_each_gid_once(rack,
                                                                             monkeypatch):
    """What `up`'s env files gate does for every node (gates.cheap_gates): the queries, the
    read, the files named; no role is loaded or rendered and each node's GID is chosen
    once."""
    facts = {node.name: node_facts(rack, node.name) for node in rack.nodes}
    renders = [counting(monkeypatch, renderer.Renderer, name)
               for name in ("value", "expr", "template")]
    loads = counting(monkeypatch, roles, "load_roles")
    chosen = counting(monkeypatch, compute, "gid_index")
    files = EnvFiles(rack, "sglang")
    for node in rack.nodes:
        files.queries(node)
        env = files.read(node, facts[node.name])
        assert env.problems == () and env.vars["NCCL_IB_GID_INDEX"].value == "5"
    assert files.files(rack.head) == [NCCL, "/etc/sparkrack/sglang.env"]
    assert [len(r) for r in renders] == [0, 0, 0] and loads == []
    assert [args[0].name for args in chosen] == [node.name for node in rack.nodes]


def test_a_provision_plan_chooses_the_gid_once_per_node(monkeypatch):
    """Role nccl_env's GID check and its template ask the same EngineEnv: one choice."""
    sys.path.insert(0, str(REPO / "tests" / "unit" / "provision"))
    from test_provision_roles import planned

    chosen = counting(monkeypatch, compute, "gid_index")
    planned("nccl_env", facts=gathered(5))
    assert len(chosen) == 1


def test_drift_names_each_variable_and_a_hand_added_one_without_reading_comments(rack):
    node = rack.node("spark-02")
    facts = node_facts(rack, "spark-02")
    text = facts.files[NCCL].content.decode()
    edited = ("# a comment of the operator's\n" + text.replace("NCCL_CROSS_NIC=1", "")
              .replace("NCCL_DEBUG=INFO", "NCCL_DEBUG=WARN") + "NCCL_ALGO=Ring\n").encode()
    env = EnvFiles(rack, "sglang").read(node, with_text(facts, NCCL, edited))
    assert env.problems == (
        f"{NCCL} is not what provision would write now: NCCL_CROSS_NIC missing (provision "
        "would write 1); NCCL_DEBUG is WARN, provision would write INFO; NCCL_ALGO=Ring is "
        "not provision's",)
    assert env.gid_moved is None
    commented = ("# rack renamed\n" + text).encode()
    assert EnvFiles(rack, "sglang").read(node, with_text(facts, NCCL, commented)) \
        .problems == ()  # comments are prose: a rank never reads them


def test_a_missing_file_and_a_failed_check_are_problems(rack):
    node = rack.node("spark-03")
    facts = node_facts(rack, "spark-03")
    files = {path: f for path, f in facts.files.items() if path != NCCL}
    cut = dataclasses.replace(facts, files=files, netdevs=("lo",))
    env = EnvFiles(rack, "sglang").read(node, cut)
    assert env.problems == (
        "nccl_env: nccl_socket_ifname enp1s0f0np0 is not an interface of this node (it has "
        "lo)", f"{NCCL} missing")


def test_the_role_asserts_the_checks_engineenv_judges(rack):
    """Each check of engineenv/checks.py is one assert of role nccl_env, and a failing one
    fails the role with the line `up` gives."""
    sys.path.insert(0, str(REPO / "tests" / "unit" / "provision"))
    from test_provision_roles import planned

    text = (REPO / "roles" / "nccl_env" / "tasks" / "main.yml").read_text()
    assert [name for name in NAMES if f"engine_env.check('{name}', facts)" in text] == \
        list(NAMES)
    facts = dataclasses.replace(gathered(5), netdevs=("lo",))
    failed = [c.summary for c in planned("nccl_env", facts=facts) if c.status == "failed"]
    env = EnvFiles(rack, "sglang").read(rack.node("spark-01"), facts)
    assert [f"nccl_env: {line}" for line in failed] == [
        p for p in env.problems if p.startswith("nccl_env: ")]
    assert failed == ["nccl_socket_ifname enp1s0f0np0 is not an interface of this node (it "
                      "has lo)"]
