"""Validate an inventory and what goes with it, contacting nothing: each file checked on
its own, so one wrong file does not hide another's mistake (docs/inventory.md#validating-offline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.core.errors import InventoryError, SparkrackError

OK, INVALID, REFUSED = 0, 2, 1  # exit codes: all good; a file is wrong; a lane is refused


@dataclass(frozen=True)
class Checked:
    """One thing validated: what it is, where, and whether it passed."""

    what: str  # inventory, engine sglang, profile sglang 512k, rules, fleet, rack NAME
    path: str
    ok: bool


@dataclass(frozen=True)
class Problem:
    """A mistake at its file and line (None: the file as a whole), with its fix; refused:
    the files are right but the rules refuse the lane (`invoke check`)."""

    what: str
    path: str
    line: int | None
    message: str
    fix: str | None = None
    refused: bool = False

    def text(self) -> str:
        """The one line `invoke validate` prints."""
        where = f"{self.path}:{self.line}" if self.line else self.path
        fix = f" ({self.fix})" if self.fix else ""
        return f"{where}: {self.message}{fix}"


@dataclass
class Validation:
    """Everything validated, the problems found and the rules' warnings."""

    checked: list[Checked] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when a file is wrong, 1 when only the rules refuse a lane, else 0."""
        if any(not p.refused for p in self.problems):
            return INVALID
        return REFUSED if self.problems else OK

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.exit_code == OK, "exit_code": self.exit_code,
                "checked": [asdict(c) for c in self.checked],
                "problems": [asdict(p) for p in self.problems], "warnings": self.warnings}

    def _run(self, what: str, path: Path | str, check: Callable[[], Any]) -> Any:
        """check() recorded as what at path; its error becomes a problem (None returned)."""
        try:
            result = check()
        except SparkrackError as error:
            self.problems.append(_problem(what, path, error))
            self.checked.append(Checked(what, str(path), False))
            return None
        self.checked.append(Checked(what, str(path), True))
        return result


def _problem(what: str, path: Path | str, error: SparkrackError) -> Problem:
    """error as a Problem: an InventoryError at its own file and line."""
    if isinstance(error, InventoryError):
        where = f"{error.path}:{error.lineno}: " if error.lineno else f"{error.path}: "
        return Problem(what, error.path, error.lineno, error.message.removeprefix(where),
                       error.fix)
    return Problem(what, str(path), None, error.message, error.fix)


def validate(inventory: str | Path | None, fleet: str | Path | None = None) -> Validation:
    """Validate the inventory at inventory (None: $SPARKRACK_INVENTORY, else
    ./inventory/rack), its engine profiles, model data and the rules, and fleet's file when
    given. Contacts nothing."""
    from sparkrack.inventory import DEFAULT_INVENTORY, load_inventory
    from sparkrack.rules import all_rules
    from sparkrack.rules.ruleset import RULES_FILE

    result = Validation()
    result._run("rules", RULES_FILE, all_rules)
    rack = result._run("inventory", inventory or "", lambda: load_inventory(inventory))
    if rack is not None:
        result.warnings += list(rack.warnings)  # legal but unusual values, file:line
        _lanes(result, rack)
    else:  # the engine files still, against their pinned versions' option tables
        _engine_files(result, Path(inventory or DEFAULT_INVENTORY))
    if fleet is not None:
        _fleet(result, Path(fleet))
    return result


def _lanes(result: Validation, rack) -> None:
    """Each engine's profile file, then every profile of it: its launch specs as `plan
    --offline` makes them and the rules as `invoke check` runs them."""
    from sparkrack.engines import load_engine
    from sparkrack.engines.catalog import engine_file
    from sparkrack.inventory.schema import ENGINES
    from sparkrack.rules import check_profile

    for engine in ENGINES:
        try:
            file = engine_file(rack.path, engine)
        except SparkrackError as error:
            result.problems.append(_problem(f"engine {engine}", rack.path, error))
            continue
        definition = result._run(f"engine {engine}", file, lambda e=engine: load_engine(
            rack.path, e, rack.vars.images))
        if definition is None:
            continue
        for profile in definition.profiles:
            report = result._run(f"profile {engine} {profile}", file,
                                 lambda e=engine, p=profile: check_profile(rack, e, p))
            if report is None:
                continue
            for finding in report.blocking:
                result.problems.append(Problem(
                    f"profile {engine} {profile}", str(file), None,
                    f"{engine} {profile}: {finding.rule}: {finding.message}",
                    f"`invoke check --engine {engine} --profile {profile}`", refused=True))
            result.warnings += [f"{engine} {profile}: {f.rule}: {f.message}"
                                for f in report.warnings if not f.waived]


def _engine_files(result: Validation, directory: Path) -> None:
    """Each engine's profile file (the inventory's own, else the shipped one) when the
    inventory itself cannot be loaded: the profiles' specs and rules need it."""
    from sparkrack.engines import load_engine
    from sparkrack.engines.catalog import engine_file
    from sparkrack.inventory.schema import ENGINES

    for engine in ENGINES:
        try:
            file = engine_file(directory, engine)
        except SparkrackError as error:
            result.problems.append(_problem(f"engine {engine}", directory, error))
            continue
        result._run(f"engine {engine}", file, lambda e=engine: load_engine(directory, e))


def _fleet(result: Validation, file: Path) -> None:
    """The fleet file, then each of its racks' inventories."""
    from sparkrack.inventory import load_inventory
    from sparkrack.racks.fleetfile import load_fleet

    fleet = result._run("fleet", file, lambda: load_fleet(file))
    if fleet is None:
        return
    for folder in fleet.racks:
        result._run(f"fleet rack {folder.name}", folder, lambda f=folder: load_inventory(f))
