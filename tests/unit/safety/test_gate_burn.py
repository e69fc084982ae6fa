"""safety/ owns the gates' burn (safety/gateburn.py): its length is a setting in its range,
every gate runs it without a caller passing a burn down, and no function outside safety/
takes one (issue 55 item 2). No node: the burn check itself is a stand-in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sparkrack
from sparkrack.core.errors import UsageError
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import powercycle
from sparkrack.safety import gateburn
from sparkrack.safety.burn import BurnResult

PACKAGE = Path(sparkrack.__file__).parent
REHEARSAL = PACKAGE.parent / "inventory" / "rehearsal"


def burn_parameters() -> list[str]:
    """file:function for each function outside safety/ with a parameter named burn, and
    file:Class.burn for each class field annotated as a callable."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("safety/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                if "burn" in [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]:
                    found.append(f"{where}:{node.name}")
            elif isinstance(node, ast.ClassDef):
                found += [f"{where}:{node.name}.burn" for item in node.body
                          if isinstance(item, ast.AnnAssign)
                          and getattr(item.target, "id", "") == "burn"
                          and "Callable" in ast.unparse(item.annotation)]
    return found


def test_no_function_outside_safety_takes_a_burn():
    assert burn_parameters() == []


def test_a_gate_burns_for_safetys_length_with_no_burn_passed(monkeypatch):
    """A power cycle's check (as every gate's) is gateburn.gate_burn: the real burn check,
    SETTINGS.gate_seconds long, its verdict the line said."""
    inventory = load_inventory(REHEARSAL)
    asked = []

    def check(inventory, nodes, seconds, fleet=None):
        asked.append(([n.name for n in nodes], seconds, fleet))
        return [BurnResult(n.name, True, "ok", "2190 MHz <= cap 2200", 2200) for n in nodes]

    monkeypatch.setattr(gateburn, "burn", check)
    monkeypatch.setattr(powercycle, "note", lambda **changed: None)
    line = powercycle.burned(inventory, inventory.node("spark-03"))
    assert asked == [(["spark-03"], 1.5, None)] and gateburn.SETTINGS.gate_seconds == 1.5
    assert line == "spark-03: back, cap unit active this boot, burn ok: 2190 MHz <= cap 2200"


@pytest.mark.parametrize("settings, line", [
    ({"gate_seconds": 0.5}, "burn gate_seconds: 0.5 is outside 1..600 s: under 1 s of load "
     "the sampler cannot take two busy readings (give 1..600 s)"),
    ({"gate_seconds": 900}, "burn gate_seconds: 900 is outside 1..600 s: a longer load "
     "proves nothing more and holds the rack lock meanwhile (give 1..600 s)"),
])
def test_a_burn_length_outside_its_range_is_refused(settings, line):
    with pytest.raises(UsageError) as refused:
        gateburn.BurnSettings(**settings)
    assert refused.value.line() == line
    assert gateburn.BURN_SECONDS.source.startswith("the sampler reads nvidia-smi every 0.5 s")
