"""The modules' planners as tables, one fixture per case as pyinfra keeps them: a module's
arguments, the node's facts and what earlier tasks of the plan did go in; the exact
commands (files, image loads) and the change come out; no command means no change. The
cases are the files of planners/<module>/ (no network)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.facts.files import FileFacts
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.facts.roce import HcaFacts, RoceFacts
from sparkrack.facts.systemd import UnitFacts
from sparkrack.provision.changes import Change, Put, Run, Transfer
from sparkrack.provision.modules import REGISTRY
from sparkrack.provision.modules.base import PlanState, Step
from sparkrack.provision.modules.params import check_params, with_defaults
from sparkrack.provision.renderer import Renderer
from sparkrack.provision.roletasks import Role
from sparkrack.transfer.images import ImageTarget

CASES = Path(__file__).parent / "planners"
KEYS = {"args", "facts", "state", "handler", "vars", "templates", "images", "commands",
        "status", "summary", "diff", "refresh", "warning", "after"}


def cases() -> list:
    return [pytest.param(path, id=f"{path.parent.name}/{path.stem}")
            for path in sorted(CASES.glob("*/*.yml"))]


def file_facts(spec: dict[str, Any]) -> FileFacts:
    """A path's facts from a case: content (text) gives size and sha256."""
    spec = dict(spec)
    content = spec.pop("content", None)
    if content is not None:
        data = content.encode()
        spec.update(content=data, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    return FileFacts(**{"exists": True, "type": "file", **spec})


def facts(spec: dict[str, Any]) -> ProvisionFacts:
    return ProvisionFacts(
        files={path: file_facts(f) for path, f in (spec.get("files") or {}).items()},
        units={name: UnitFacts(**u) for name, u in (spec.get("units") or {}).items()},
        roce=RoceFacts({name: HcaFacts(**h) for name, h in (spec.get("roce") or {}).items()}),
        guards={tuple(argv): rc for argv, rc in spec.get("guards") or []},
        guard_reasons={tuple(argv): why for argv, why in spec.get("guard_reasons") or []},
        images=spec.get("images"), images_error=spec.get("images_error"))


def shown(action) -> Any:
    """An action as the cases write it: a Run as its argv (a wrapped one as what it shows
    and the arguments after its script), a Put as path, mode and content, a Transfer as
    ref, image ID and source."""
    if isinstance(action, Run):
        return list(action.argv) if not action.shown else {
            "run": action.shown, "args": list(action.argv[3:])}
    if isinstance(action, Put):
        return {"put": action.path, "mode": f"{action.mode:04o}",
                "content": action.content.decode()}
    assert isinstance(action, Transfer)
    return {"transfer": action.ref, "id": action.image_id, "source": action.source}


def planned(case: dict[str, Any], module: str, tmp_path: Path) -> tuple[Change, PlanState]:
    """The case's change, planned by the module's planner as plan.py calls it."""
    declared = REGISTRY[module].params
    assert check_params(declared, case["args"], module, rendered=True) is None
    state = PlanState(**{"user": "root", "absent": False, **(case.get("state") or {})})
    for key in ("started", "stopped", "removed"):
        setattr(state, key, set(getattr(state, key)))
    state.planned = {path: tuple(value) for path, value in state.planned.items()}
    (tmp_path / "templates").mkdir()
    for name, text in (case.get("templates") or {}).items():
        (tmp_path / "templates" / name).write_text(text)
    role = Role("r", tmp_path, {}, (), ())
    node_facts = facts(case.get("facts") or {})
    context = {**(case.get("vars") or {}), "facts": node_facts}
    targets = {ref: ImageTarget(ref, **target) for ref, target in (case.get("images")
                                                                   or {}).items()}
    base = Change("r", "t", module, "ok", handler=bool(case.get("handler")))
    step = Step(base, role, with_defaults(declared, case["args"]), context, node_facts,
                state, Renderer(), targets)
    return REGISTRY[module].plan(step), state


@pytest.mark.parametrize("path", cases())
def test_planner(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    assert set(case) <= KEYS and {"args", "commands", "status", "summary"} <= set(case), path
    change, state = planned(case, path.parent.name, tmp_path)
    assert [shown(action) for action in change.actions] == case["commands"]
    assert (change.status, change.summary) == (case["status"], case["summary"])
    assert change.diff == case.get("diff", change.diff)
    assert change.refresh is case.get("refresh", False)
    assert change.warning == case.get("warning", "")
    for key, value in (case.get("after") or {}).items():
        assert as_written(getattr(state, key)) == value, key


def as_written(value: Any) -> Any:
    """A PlanState field as YAML writes it: sets sorted, tuples as lists."""
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, dict):
        return {key: as_written(item) for key, item in value.items()}
    return list(value) if isinstance(value, tuple) else value


def test_every_module_has_its_table():
    tables = {folder.name: len(list(folder.glob("*.yml"))) for folder in CASES.iterdir()}
    assert set(tables) == set(REGISTRY)
    assert all(count >= 3 for count in tables.values()), tables
