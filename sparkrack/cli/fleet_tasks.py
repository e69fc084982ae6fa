"""The `fleet` collection: several racks behind one router (SMG).

`fleet.status`, `fleet.roll`, `fleet.up`, `fleet.down` (docs/fleet.md)."""

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


ROLL_HELP = {"fleet": FLEET_HELP, "engine": "sglang or vllm",
             "profile": "profile name (default: 512k)", "json": "print each rack's steps as JSON"}


def _said(reports, as_json: bool, what: str) -> None:
    if as_json:
        console.print_json([report.as_dict() for report in reports])
        return
    for report in reports:
        steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.steps.items())
        console.say(f"{report.rack}: {what} ({steps}); drained {report.drained or 0}, soak "
                    f"{report.soak_requests:g} request(s), {report.soak_failed:g} failed")
        if report.warning:
            console.say(f"{report.rack}: warning before its drain: {report.warning}")


@task(help=ROLL_HELP)
@operator_task
def roll(c, engine, profile="512k", fleet=None, json=False):
    """Roll each rack in turn behind the router; stop at the first failure.

    Per rack: the others ready in the router, the rack drained through it (then its own
    in-flight count zero), `roll` with its gates, a direct smoke request, registered again,
    a soak on the router's error rate. Each rack's lock and audit log hold its part."""
    from sparkrack.racks.roll import fleet_roll

    _said(fleet_roll(fleet_from(fleet), engine, profile, on_event=console.say),
          json, f"rolled to {engine} {profile}")


@task(help=ROLL_HELP)
@operator_task
def up(c, engine, profile="512k", fleet=None, json=False):
    """Start each rack that serves nothing, register it, soak; one at a time."""
    from sparkrack.racks.roll import fleet_up

    _said(fleet_up(fleet_from(fleet), engine, profile, on_event=console.say),
          json, "serving")


@task(help={"fleet": FLEET_HELP, "json": "print each rack's steps as JSON"})
@operator_task
def down(c, fleet=None, json=False):
    """Drain each rack through the router, then stop it; one at a time."""
    from sparkrack.racks.roll import fleet_down

    _said(fleet_down(fleet_from(fleet), on_event=console.say), json, "stopped")
