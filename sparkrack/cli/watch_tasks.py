"""The rank watchdog, in a shell or as a service on a node.

The `watch` collection: `invoke watch` (its default task) runs it in a shell;
`watch.install`, `watch.uninstall` and `watch.status` keep it as a service on a rack node
(sparkrack/watchdog/)."""

from invoke.exceptions import Exit

from sparkrack.cli.common import (
    INVENTORY_HELP,
    WAIT_HELP,
    inventory_from,
    operator_task,
    rack_task,
)
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "watch"

ON_HELP = "the node the watchdog runs on (default: where it is recorded, else the head)"
PLACE_HELP = {
    "install_dir": "where it is installed on the node (default /opt/sparkrack-watchdog): a "
                   "directory of its own, absent or empty (or one it made); never a system "
                   "directory",
    "python": "the node's Python that runs it (default /usr/bin/python3); it must match "
              "this machine's (version, architecture): the libraries are copied from here",
}


LISTEN_HELP = ("the address on the node its Prometheus metrics listen on (default: the "
               "node's ansible_host, its management address); 0.0.0.0: every interface")


def _settings(rack, install_dir=None, python=None, listen=None, allow_power_cycle=False):
    """The install settings: the flags given, else where it is recorded, else defaults."""
    from sparkrack.inventory.watchdog_record import read_record
    from sparkrack.watchdog.settings import Settings

    defaults = Settings()
    record = read_record(rack.path)
    recorded = record.install_dir if record is not None else None
    return Settings(install_dir=install_dir or recorded or defaults.install_dir,
                    python=python or defaults.python, listen=listen or defaults.listen,
                    allow_power_cycle=bool(allow_power_cycle))


@task(default=True, help={
    "inventory": INVENTORY_HELP, "duration": "stop watching after this many seconds",
    "restart": "restart the group in order instead of stopping it",
    "interval": "seconds between polls (default 1)", **WAIT_HELP})
@rack_task(changing=lambda a: a["restart"])
def watch(c, inventory=None, duration=None, restart=False, interval=1.0):
    """Rank watchdog: stop (or --restart) a group that lost a rank or stalls.

    Stalled: requests pending, no token moving for the stall budget, one GPU unlike its
    peers (the rank is named). A lost node's rank is stopped as soon as the node answers
    again. Also warns when a node's MemAvailable ratchets down request after request."""
    from sparkrack.watchdog.watch import watch_group

    rack = inventory_from(inventory)
    report = watch_group(rack, duration=float(duration) if duration else None,
                         interval=float(interval), restart=restart, on_event=console.say)
    if report.failure:
        left = (f"; still running on nodes that did not answer: {', '.join(report.left_running)}"
                " (`invoke down` once they answer)" if report.left_running else "")
        raise Exit(f"watch: {report.failure} ({report.acted or 'nothing to do'}){left}", code=1)


@task(help={"on": ON_HELP, "inventory": INVENTORY_HELP,
            "check": "probe the node and say what would be done; change nothing",
            "listen": LISTEN_HELP, **PLACE_HELP, **WAIT_HELP,
            "allow_power_cycle": "let the watchdog cut a node's power through the PDU when "
                                 "its GPU latched while its group was busy (default: it only "
                                 "says so)"})
@rack_task(changing=lambda a: not a["check"], name="watch.install")
def install(c, on=None, inventory=None, check=False, install_dir=None, python=None,
            listen=None, allow_power_cycle=False):
    """Install the watchdog as a systemd service on a node.

    Default: the head. Ships sparkrack, its libraries and the inventory (the node needs no
    network), makes the watchdog's own SSH key on the node, authorizes it on every node
    (role watchdog_key) from the node's address only, starts the unit (Restart=always, at
    boot, journal). Refuses a system directory or one it did not make, and a node that
    cannot tell the address it reaches the others from. Again: changes only what differs."""
    from sparkrack.watchdog.install import install as run_install

    rack = inventory_from(inventory)
    report = run_install(rack, on, settings=_settings(rack, install_dir, python, listen,
                                                      allow_power_cycle),
                         check=check, say=console.say)
    if check:
        return
    if report.changed:
        console.say(f"watch.install: the watchdog runs on {report.node}"
                    + (f", {report.serving}" if report.serving else ""))
    else:
        console.say(f"watch.install: the watchdog on {report.node} is up to date; nothing "
                    "changed")


@task(help={"on": ON_HELP, "inventory": INVENTORY_HELP,
            "check": "say what would be removed; change nothing",
            "install_dir": PLACE_HELP["install_dir"], **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], name="watch.uninstall")
def uninstall(c, on=None, inventory=None, check=False, install_dir=None):
    """Remove the watchdog service and its key from every node.

    Unit, files, state, its key on every node, its record."""
    from sparkrack.watchdog.uninstall import uninstall as run_uninstall

    rack = inventory_from(inventory)
    report = run_uninstall(rack, on, settings=_settings(rack, install_dir), check=check,
                           say=console.say)
    if not check:
        console.say(f"watch.uninstall: nothing of the watchdog is left on {report.node}")


@task(help={"on": ON_HELP, "inventory": INVENTORY_HELP, "json": "print JSON for scripts",
            "verdicts": "how many of its last verdicts to show (default 5)"})
@operator_task
def status(c, on=None, inventory=None, json=False, verdicts=5):
    """Where the watchdog runs, since when, its verdicts and metrics URL.

    Read-only. Exit 0 when the service is active, 1 otherwise."""
    import time

    from sparkrack.watchdog.status import cycle_lines
    from sparkrack.watchdog.status import status as read_status

    rack = inventory_from(inventory)
    found = read_status(rack, on)
    if json:
        console.print_json(found.as_dict())
    elif not found.installed:
        print(f"the watchdog is not installed on {found.node} (`invoke watch.install`)")
    else:
        since = f" since {found.since}" if found.since else ""
        restarts = f", {found.restarts} restart(s) by systemd" if found.restarts else ""
        print(f"watchdog on {found.node} ({found.address}): {found.active_state}"
              f"{f' ({found.sub_state})' if found.sub_state else ''}{since}{restarts}, "
              f"{found.enabled or 'no unit file'}")
        print(f"metrics: {found.metrics_url}")
        if not found.recorded:
            print(f"warning: no key record for {found.node} in the inventory "
                  "(.sparkrack/watchdog.json): `invoke provision` will not keep its key "
                  "authorized")
        if found.state_error:
            print(f"warning: {found.state_error}")
        if found.stale:
            print(f"warning: the node's copy differs from what watch.install would ship now "
                  f"({', '.join(found.stale[:5])}{' ...' if len(found.stale) > 5 else ''}): "
                  "run `invoke watch.install` (after an upgrade, onboarding or any inventory "
                  "change)")
        if found.edited:
            print(f"note: the node changed data files of lib/ in place ({', '.join(found.edited)}):"
                  " kept, as no code hashes them (a site's security agent may append its CA "
                  "to a bundle)")
        shown = list(found.verdicts)[-int(verdicts):] if int(verdicts) > 0 else []
        if shown:
            console.print_table(f"last {len(shown)} verdict(s)", ["time", "verdict", "detail"], [
                [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.get("time", 0))),
                 v.get("verdict", ""), v.get("detail", "")] for v in shown])
        restarts_made = found.budget.get("restarts") or []
        if restarts_made:
            print(f"restarts in the budget window: {len(restarts_made)}")
        for line in cycle_lines(found.cycles, time.time()):
            print(line)
    if not found.running:
        raise Exit(code=1)
