"""`invoke onboard`: a bare Spark into the rack, as a member in place of --replace OLD or as
a staged spare (sparkrack/onboard/)."""

import sys

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, WAIT_HELP, inventory_from, rack_task
from sparkrack.cli.flags import QUIET_HELP, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = None

VERDICT_STYLE = {"ok": "green", "changed": "yellow", "would": "cyan", "refused": "bold red",
                 "failed": "bold red", "skipped": "dim"}


def _parse_waivers(values) -> dict[str, str]:
    waivers = {}
    for value in values or ():
        kind, sep, reason = value.partition("=")
        if not sep:
            raise UsageError(f"--waive {value!r} has no reason",
                             fix="--waive KIND=REASON, e.g. --waive 'mtu=switch port is 9000 "
                             "too, the node reports wrong'")
        waivers[kind.strip()] = reason
    return waivers


def _ask(question: str) -> bool:
    console.err.print(question + " [y/N] ", end="", markup=False)
    try:
        answer = input()
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _printer(json: bool):
    def event(kind, step, text):
        if json:
            return
        if kind == "start":
            console.say(f"[{step.number}/6] {step.name} ...")
        elif kind == "line":
            console.say(f"    {text}")
        elif kind == "end":
            console.say(f"[{step.number}/6] {step.name}: {step.verdict.upper()}"
                        f"{' - ' + step.summary if step.summary else ''} ({step.seconds:.1f} s)")
    return event


@task(iterable=["waive"], help={
    "name": "the new node's name, e.g. spark-09",
    "address": "its management address (ansible_host)",
    "replace": "the member it replaces: takes that rank; the member leaves the inventory",
    "check": "steps 1-2 only, and what 3-6 would do; writes nothing (not even known_hosts)",
    "fingerprint": "the expected host key fingerprint, SHA256:... (needed without a terminal)",
    "yes": "do not ask before changing the node (the host key still needs confirming)",
    "waive": "KIND=REASON: accept a refusing difference (driver-major, mtu, ...); repeatable",
    "roce_addr": "its RoCE fabric address, IPv4 (default: the members' convention)",
    "roce_twin_addr": "its twin netdev's fabric address (default: the IPv4 there, when the "
                      "members have one)",
    "peer": "the member to copy images and weights from (default: the last rank's)",
    "bwlimit": "MiB/s cap for the weight copy (spares the fabric of a serving rack)",
    "burn_seconds": "burn check length (default 5)",
    "full_verify": "re-hash every weight file already on the node (ignore its hash cache)",
    "inventory": INVENTORY_HELP, "json": "print the report as JSON", "quiet": QUIET_HELP,
    **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"],
           headless=lambda a, rack: a["replace"] == rack.head.name)
def onboard(c, name, address, replace=None, check=False, fingerprint=None, yes=False,
            waive=None, roce_addr=None, roce_twin_addr=None, peer=None, bwlimit=None, burn_seconds=5.0,
            full_verify=False, inventory=None, json=False, quiet=False):
    """Make a bare Spark a member of the rack, or a staged spare.

    --replace OLD: under OLD's rank. Trust, baseline, provision, stage, verify, join. Exit 1
    if a step refused or failed."""
    from sparkrack.onboard import as_json
    from sparkrack.onboard import onboard as run_onboard
    from sparkrack.onboard.run import render_summary
    from sparkrack.transfer.show import TransferProgress

    rack = inventory_from(inventory)
    interactive = sys.stdin.isatty() and not json
    with TransferProgress(quiet=quiet, silent=json) as progress:
        report = run_onboard(
            rack, name, address, replace=replace, check=check, fingerprint=fingerprint,
            confirm=_ask if interactive else None, assume_yes=yes,
            waivers=_parse_waivers(waive), roce_addr=roce_addr, roce_twin_addr=roce_twin_addr,
            peer=peer, burn_seconds=float(burn_seconds),
            bwlimit=float(bwlimit) * 2**20 if bwlimit else None,
            full_verify=full_verify, on_event=_printer(json), on_progress=progress)
    from sparkrack.oplock.audit import note

    note(nodes=[name], waivers=_parse_waivers(waive), joined=report.joined,
         **({"replaced": replace} if replace and report.joined else {}),
         files=[str(rack.path / "hosts.yml")] if report.joined else [])
    if json:
        console.print_json(as_json(report))
    else:
        rows = render_summary(report)
        console.print_table(f"onboard {name}{' (check)' if check else ''}",
                            ["step", "verdict", "s", "summary"], rows)
        if report.message:
            console.out.print(report.message, markup=False)
    if report.exit_code:
        raise Exit(code=report.exit_code)
