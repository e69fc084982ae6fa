"""Each kind of fact defined once (issue 55, item 3): its node-side function, the name the
node script dispatches it by and its parser side by side in one `Fact`; the registry on
each side holds every kind exactly once, every query's arguments fit its function, and the
docs' table of the facts script names every kind."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import sparkrack.facts
from sparkrack.facts import (
    capture,
    docker,
    files,
    gpu,
    netplan,
    node,
    onboard,
    provision,
    roce,
    systemd,
    watchdog,
)
from sparkrack.facts.queries import KINDS, Fact, answer, argv
from sparkrack.remote import gather

REPO = Path(__file__).resolve().parents[3]


def all_kinds() -> dict[str, Fact]:
    """KINDS once every module of sparkrack/facts/ is imported."""
    for module in pkgutil.iter_modules(sparkrack.facts.__path__):
        importlib.import_module(f"sparkrack.facts.{module.name}")
    return KINDS


def one_query_of_each_kind():
    return [files.file_query("/etc/hostname"), systemd.unit_query("ssh.service"),
            roce.roce_query("rocep1s0f0"), roce.FUNCTIONS, roce.NETDEVS,
            provision.guard_query(["true"]), docker.IMAGES, netplan.NETPLAN, node.NODE,
            node.MEMORY, gpu.SAMPLE, gpu.THERMAL, capture.CUDA, onboard.DOCKER,
            onboard.links_query(["rocep1s0f0"], ["lo"]),
            watchdog.probe_query(python="python3", install_dir="/opt/w", key_path="/k",
                                 unit_path="/u", state_dir="/s", state_file="/s/f",
                                 systemctl="systemctl", unit="w.service",
                                 peers=[("10.77.1.11", 22)])]


def test_every_kind_is_one_node_function_the_script_dispatches_by_its_name():
    kinds = all_kinds()
    assert set(kinds) == set(gather.SECTIONS)
    for name, kind in kinds.items():
        assert gather.SECTIONS[name] is kind.section and kind.name == name


def test_a_second_kind_for_one_node_function_is_refused():
    try:
        Fact(gather.file_section, files.parse_file)
    except ValueError as error:
        assert str(error) == "two kinds of fact are answered by file_section"
    else:
        raise AssertionError("a second FILE was registered")
    assert KINDS["file_section"] is files.FILE


def test_every_query_fits_its_node_function():
    queries = one_query_of_each_kind()
    assert {q.kind.name for q in queries} == set(all_kinds())
    for query in queries:
        inspect.signature(query.kind.section).bind(*json.loads(query.args))
    command = argv(queries)
    assert command[5::2] == [q.kind.name for q in queries]


def test_each_answer_is_read_by_its_own_kind():
    """One script output, every section parsed by the parser its query's kind names."""
    asked = [files.file_query("/a"), roce.roce_query("mlx5_0"), provision.guard_query(["x"]),
             onboard.DOCKER, capture.CUDA]
    text = ("@@base\nboot\n1.5\n@@0 file_section\nmissing\n@@1 hca_section\npresent\n"
            "state 4: ACTIVE\n@@2 guard_section\nrc 1\nwhy no\n@@3 daemon_section\n"
            "version 28.3.3\n@@4 cuda_section\ncuda 13.0\n")
    answers = answer(text, asked)
    assert answers.get(asked[0]) == files.FileFacts()
    assert answers.get(asked[1]).state == "4: ACTIVE"
    assert answers.get(asked[2]) == (1, "no")
    assert answers.get(asked[3]).version == "28.3.3"
    assert answers.get(asked[4]) == "13.0"
    assert answers.found(docker.IMAGES, "not asked") == "not asked"
    assert answers.each(files.FILE) == {("/a",): files.FileFacts()}


def test_the_docs_table_of_the_facts_script_names_every_kind():
    text = (REPO / "docs" / "internals.md").read_text()
    table = text.split("### The facts script", 1)[1].split("\n\n", 3)[2]
    named = set(re.findall(r"^\| `(\w+)\(", table, re.MULTILINE))
    assert named == set(all_kinds())
