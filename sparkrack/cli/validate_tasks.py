"""`invoke validate`: the inventory, its profiles and model data, the rules and a fleet file,
checked offline; `--schema FILE` writes the inventory's JSON Schema for YAML editors
(docs/inventory.md#validating-offline)."""

import os
import sys
from pathlib import Path

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = None


@task(help={"inventory": INVENTORY_HELP,
            "fleet": "a fleet file to validate too, with its racks' inventories (default: "
                     "$SPARKRACK_FLEET, else ./fleet.yml when there is one)",
            "json": "print JSON for scripts and CI: what was checked, each problem at its "
                    "file and line",
            "schema": "write the inventory's JSON Schema to FILE ('-': print it) for a YAML "
                      "editor, and validate nothing"})
@operator_task
def validate(c, inventory=None, fleet=None, json=False, schema=None):
    """Check the inventory, profiles, rules and a fleet file, offline.

    Contacts nothing. Every file is checked on its own, each mistake named at its file and
    line. Exit 0 when all is valid, 1 when the files are but the rules refuse a lane
    (`invoke check`), 2 when a file is wrong. --schema FILE: the inventory's JSON Schema, for
    the `# yaml-language-server: $schema=FILE` line of an inventory file."""
    if schema is not None:
        _write_schema(schema)
        return
    from sparkrack.core.terminal import for_terminal
    from sparkrack.validate import validate as run_validate

    found = run_validate(inventory or os.environ.get("SPARKRACK_INVENTORY") or None,
                         _fleet_file(fleet))
    if json:
        console.print_json(found.as_dict())
    else:
        console.print_table("validate", ["checked", "file", "verdict"],
                            [[c.what, c.path, "ok" if c.ok else "WRONG"]
                             for c in found.checked])
        for line in [("refused: " if p.refused else "error: ") + p.text() for p in found.problems
                     ] + [f"warning: {warning}" for warning in found.warnings]:
            console.say(for_terminal(line, sys.stderr))  # a terminal: broken at spaces
    if found.exit_code:
        wrong = sum(not p.refused for p in found.problems)
        raise Exit(f"validate: {wrong} problem(s) in the files" if wrong else
                   f"validate: the rules refuse {len(found.problems)} lane(s)",
                   code=found.exit_code)
    if not json:
        console.say(f"validate: {len(found.checked)} checked, all valid")


def _fleet_file(fleet: str | None) -> str | None:
    """The fleet file to validate: --fleet, $SPARKRACK_FLEET, else ./fleet.yml if there."""
    chosen = fleet or os.environ.get("SPARKRACK_FLEET")
    if chosen:
        return chosen
    return "fleet.yml" if Path("fleet.yml").is_file() else None



def _write_schema(target: str) -> None:
    """The inventory's JSON Schema into target ('-': stdout)."""
    import json

    from sparkrack.core.atomic import write_atomically
    from sparkrack.inventory.jsonschema import inventory_schema

    text = json.dumps(inventory_schema(), indent=2) + "\n"
    if target == "-":
        print(text, end="")
        return
    write_atomically(Path(target), text, mode=0o644)
    console.say(f"wrote {target}; an inventory file whose first line is `# yaml-language-server: "
                f"$schema={target}` is completed and checked by a YAML editor")
