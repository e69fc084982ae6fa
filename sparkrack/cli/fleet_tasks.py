"""The `fleet` collection: several racks behind one router (SMG).

`fleet.status` (docs/fleet.md)."""

import os

from sparkrack.cli.common import operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "fleet"

FLEET_HELP = "the fleet file (default: $SPARKRACK_FLEET, else ./fleet.yml)"


def fleet_from(path: str | None):
    """The fleet file named by -f, $SPARKRACK_FLEET or ./fleet.yml, checked."""
    from sparkrack.racks.fleetfile import load_fleet

    return load_fleet(path or os.environ.get("SPARKRACK_FLEET") or "fleet.yml")


@task(help={"fleet": FLEET_HELP, "json": "print JSON for scripts"})
@operator_task
def status(c, fleet=None, json=False):
    """Show each rack of the fleet: what it serves, the router's view of it.

    Changes nothing. Exit 1 when the router does not answer or a rack is not ready in it."""
    from invoke.exceptions import Exit

    from sparkrack.racks.status import as_json, fleet_status

    chosen = fleet_from(fleet)
    rows, problem = fleet_status(chosen)
    if json:
        console.print_json(as_json(rows, problem, chosen))
    else:
        console.print_table(f"fleet {chosen.name}: router {chosen.router.url}",
                            ["rack", "serving", "head api", "health", "router", "load"],
                            [[r.rack, r.serving, r.api, r.health, r.router, r.load]
                             for r in rows], wrap=["head api"])
        for row in rows:
            if row.problem:
                console.say(f"{row.rack}: {row.problem}")
        if problem:
            console.say(problem)
    if problem or any(row.router != "ready" for row in rows):
        raise Exit(code=1)
