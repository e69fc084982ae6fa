"""Saved bench results here (no rack): names, the local copy, loading, and the
`bench.compare` task printing every row with its delta and ties."""

import json

import pytest
from invoke import Context

from sparkrack.bench import store
from sparkrack.bench.prompts import PROMPT_NAMES
from sparkrack.bench.result import BenchResult, PromptResult, Run, UserRun, UsersResult
from sparkrack.cli import bench_tasks
from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory

REHEARSAL = "inventory/rehearsal"


def _result(name, engine, rates, users=(), accept=None):
    single = [PromptResult(p, [Run(r, 0.1, 64, 100, 1.7, "length") for r in runs])
              for p, runs in zip(PROMPT_NAMES, rates, strict=False)]
    u = UsersResult(len(users), [UserRun(r, 0.2, 64, 100, 2.0, "length", user=i + 1,
                                         prompt=PROMPT_NAMES[i % 3]) for i, r in enumerate(users)],
                    sum(users) * 0.9, 2.0) if users else None
    return BenchResult(name=name, suite="full", date="2026-11-30T11:20:03+00:00", started=1.0,
                       deployment={"engine": engine, "profile": "512k", "deployment_id": "d",
                                   "image_id": "sha256:abc", "spec_hash": "f" * 64},
                       settings={}, single=single, users=u, accept_length=accept,
                       accept_source="test" if accept else None)


@pytest.fixture
def rehearsal_inventory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    from pathlib import Path
    return load_inventory(Path(__file__).resolve().parents[3] / REHEARSAL)


@pytest.mark.parametrize("name", ["", "../x", "a/b", "x.json", "-x", "a b", "x" * 200])
def test_bad_names_are_refused(name):
    with pytest.raises(UsageError):
        store.check_name(name)


def test_save_and_load_locally(rehearsal_inventory, tmp_path):
    result = _result("vllm-mtp3", "vllm", [[30.0, 30.1, 29.9]] * 3, users=[30.0] * 4, accept=2.89)
    path = store.save_local(rehearsal_inventory, result)
    assert path == tmp_path / "sparkrack" / "bench" / "rehearsal" / "vllm-mtp3.json"
    loaded, where = store.load(rehearsal_inventory, "vllm-mtp3")
    assert where == str(path) and loaded.as_dict() == result.as_dict()
    by_path, _ = store.load(rehearsal_inventory, str(path))
    assert by_path.as_dict() == result.as_dict()
    assert store.saved_names(rehearsal_inventory) == ["vllm-mtp3"]
    with pytest.raises(UsageError, match="saved here: vllm-mtp3"):
        store.load(rehearsal_inventory, "nothing-like-it")
    path.write_text("{}")
    with pytest.raises(UsageError, match="not a bench result"):
        store.load(rehearsal_inventory, "vllm-mtp3")


def test_compare_task_prints_every_row_with_delta_and_ties(rehearsal_inventory, capsys):
    a = _result("vllm-run", "vllm", [[30.0] * 3, [30.0] * 3, [30.0] * 3], users=[30.0] * 4,
                accept=2.89)
    b = _result("sglang-run", "sglang", [[40.0] * 3, [30.6] * 3, [29.4] * 3], users=[40.0] * 4,
                accept=2.83)
    store.save_local(rehearsal_inventory, a)
    store.save_local(rehearsal_inventory, b)
    bench_tasks.compare(Context(), "vllm-run", "sglang-run",
                        inventory=str(rehearsal_inventory.path))
    out = capsys.readouterr().out.splitlines()
    rows = [line.split("\t") for line in out if line.count("\t") == 4]
    assert rows[0] == ["measure", "vllm-run", "sglang-run", "B - A", "verdict"]
    by_label = {r[0]: r for r in rows[1:]}
    assert by_label["decode code"][1:] == ["30.00 tok/s", "40.00 tok/s", "+10.00 (+33.3%)",
                                           "sglang-run"]
    assert by_label["decode prose"][4] == "tie" and by_label["decode explanation"][4] == "tie"
    assert by_label["accept length"][4] == "tie"
    assert len(rows) - 1 == 6 + 5 + 1  # decode x3, TTFT x3, users aggregate + 4, accept
    assert any(line.startswith("engine\tvllm\tsglang") for line in out)

    bench_tasks.compare(Context(), "vllm-run", "sglang-run",
                        inventory=str(rehearsal_inventory.path), json=True)
    data = json.loads(capsys.readouterr().out)
    assert data["tie_pct"] == 3.0 and len(data["rows"]) == 12
