"""`invoke check`: the findings table, JSON, --list, --explain and the exit codes."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from invoke import Collection, Program

from sparkrack.cli import check_tasks
from sparkrack.data import shipped

REPO = Path(__file__).resolve().parents[3]
INVENTORY = str(REPO / "inventory" / "rack")


def run_check(*args: str) -> int:
    """Run `invoke check ARGS` in this process; the exit code."""
    try:
        Program(namespace=Collection.from_module(check_tasks)).run(["invoke", "check", *args])
    except SystemExit as stop:
        return stop.code
    return 0


def test_working_profile_passes(capsys):
    assert run_check("--engine", "sglang", "-i", INVENTORY) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["severity\trule\twhere\tfinding"]
    assert "note: HOST-KERNEL not checked: no node facts given" in captured.err
    assert "sglang 512k: may start (0 error(s), 0 warning(s), 0 waived)" in captured.err


def test_warnings_print_and_do_not_block(capsys):
    assert run_check("--engine", "vllm", "--profile", "1m-nvfp4", "-i", INVENTORY) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split("\t")[:3] for row in rows] == [
        ["warning", "KV-FIT", "all ranks"], ["warning", "NVFP4-KV-CONTEXT", "all ranks"],
        ["warning", "EXPERIMENTAL", "rack"]]


@pytest.fixture
def broken_rack(tmp_path):
    """The real inventory with an SGLang 512k that leaves autotune on and a waived KV-FIT."""
    rack = Path(shutil.copytree(REPO / "inventory" / "rack", tmp_path / "rack"))
    data = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    profile = data["profiles"]["512k"]
    del profile["flags"]["--disable-flashinfer-autotune"]
    profile["flags"]["--context-length"] = 1048576
    profile["waivers"] = {"KV-FIT": "measured: the pool fits with mem-fraction 0.85"}
    (rack / ".sparkrack" / "engines").mkdir(parents=True)
    (rack / ".sparkrack" / "engines" / "sglang.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return str(rack)


def test_blocking_finding_exits_1_naming_the_rule(capsys, broken_rack):
    assert run_check("--engine", "sglang", "-i", broken_rack) == 1
    captured = capsys.readouterr()
    rows = [row.split("\t") for row in captured.out.splitlines()[1:]]
    assert [row[:3] for row in rows] == [["error", "SM121-AUTOTUNE", "all ranks"],
                                         ["error (waived)", "KV-FIT", "all ranks"]]
    assert rows[1][3].endswith("[waived: measured: the pool fits with mem-fraction 0.85]")
    assert "refused: sglang 512k: blocked by SM121-AUTOTUNE (2 error(s), 0 warning(s), " \
           "1 waived)" in captured.err


def test_json_report(capsys, broken_rack):
    assert run_check("--engine", "sglang", "-i", broken_rack, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["blocking"] is True
    assert report["waivers"] == {"KV-FIT": "measured: the pool fits with mem-fraction 0.85"}
    assert [(f["rule"], f["blocking"], f["waived"]) for f in report["findings"]] == [
        ("SM121-AUTOTUNE", True, False), ("KV-FIT", False, True)]
    assert report["findings"][0]["nodes"][0] == "spark-01"


def test_list_and_explain(capsys):
    assert run_check("--list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "rule\tseverity\tengines\tmessage"
    assert "SM121-AUTOTUNE\terror\tsglang\tFlashInfer autotune must be disabled on SM121" in lines
    assert run_check("--list", "--json") == 0
    assert {"id": "NVFP4-KV-CONTEXT", "severity": "warning", "engines": ["vllm"],
            "message": "nvfp4_ds_mla KV is shown to work up to 754K tokens of context only"} \
        in json.loads(capsys.readouterr().out)
    assert run_check("--explain", "DSA-INDEXER-BUDGET") == 0
    out = capsys.readouterr().out
    assert "Evidence:" in out and "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=0.01" in out


def test_usage_errors_exit_2(capsys):
    assert run_check() == 2
    assert "error: no engine given" in capsys.readouterr().err
    assert run_check("--explain", "NOPE") == 2
    assert run_check("--engine", "sglang", "--profile", "2m", "-i", INVENTORY) == 2
    assert "unknown sglang profile '2m'" in capsys.readouterr().err
