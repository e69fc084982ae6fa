"""`invoke bench.compare A B --plot FILE` (sparkrack.bench.plot): each measure's A and B as
bars side by side, the tie band around A, as the SVG a person opens shows them: the bars'
heights in the runs' ratio, the band 3 % of A either way, the verdict on each panel; PNG
too; a wrong extension or no matplotlib is one line and exit 2."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

import pytest
from invoke import Context
from invoke.exceptions import Exit
from test_bench_store import _result, rehearsal_inventory  # noqa: F401 (a fixture)

from sparkrack.bench import store
from sparkrack.cli import bench_tasks

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def saved(rehearsal_inventory):  # noqa: F811
    a = _result("vllm-run", "vllm", [[30.0] * 3, [30.0] * 3, [30.0] * 3], users=[30.0] * 4,
                accept=2.89)
    b = _result("sglang-run", "sglang", [[40.0] * 3, [30.6] * 3, [29.4] * 3],
                users=[40.0] * 4, accept=2.83)
    store.save_local(rehearsal_inventory, a)
    store.save_local(rehearsal_inventory, b)
    return str(rehearsal_inventory.path)


def vertical_extent(group) -> float:
    """The height of the one shape a gid group of the SVG holds (its path's y span)."""
    path = next(group.iter(f"{SVG}path"))
    ys = [float(y) for y in re.findall(r"[ML]\s*[-\d.]+\s+([-\d.]+)", path.get("d"))]
    return max(ys) - min(ys)


def test_an_svg_with_a_and_b_side_by_side_and_the_tie_band(saved, tmp_path, capsys):
    out = tmp_path / "compare.svg"
    bench_tasks.compare(Context(), "vllm-run", "sglang-run", inventory=saved, plot=str(out))
    assert "\tsglang-run" in capsys.readouterr().out  # the table is printed as before
    root = ET.parse(out).getroot()
    groups = {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("id")}
    for key in ("decode.code", "decode.prose", "ttft.code", "users.aggregate", "accept_length"):
        assert {f"bar-{key}-a", f"bar-{key}-b", f"tie-{key}"} <= groups.keys(), key
    a = vertical_extent(groups["bar-decode.code-a"])
    b = vertical_extent(groups["bar-decode.code-b"])
    assert b / a == pytest.approx(40 / 30, rel=0.01)  # the bars say what the runs measured
    band = vertical_extent(groups["tie-decode.code"])
    assert band / a == pytest.approx(0.06, rel=0.02)  # A within 3 % either way
    text = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    assert "decode code (tok/s)" in text and "B ahead, B - A +33.3%" in text
    assert "tie, B - A +2.0%" in text  # decode prose: 30.6 against 30
    assert "A: vllm-run" in text and "B: sglang-run" in text and "tie: within 3% of A" in text


def test_a_png_too(saved, tmp_path):
    out = tmp_path / "compare.png"
    bench_tasks.compare(Context(), "vllm-run", "sglang-run", inventory=saved, plot=str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 1000 and height > 600


def test_another_extension_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(Exit) as refused:
        bench_tasks.compare(Context(), "no-such-run", "nor-this", inventory="/nonexistent",
                            plot=str(tmp_path / "compare.pdf"))
    assert refused.value.code == 2
    assert refused.value.message == (f"error: --plot {tmp_path}/compare.pdf: the file must end "
                                     "in .svg or .png (e.g. --plot compare.svg)")


def test_without_matplotlib_it_names_the_extra(saved, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(Exit) as refused:
        bench_tasks.compare(Context(), "vllm-run", "sglang-run", inventory=saved,
                            plot=str(tmp_path / "x.svg"))
    assert refused.value.message == ("error: --plot needs matplotlib, an optional extra "
                                     "(pip install 'sparkrack[plot]')")
    assert refused.value.code == 2
