"""The local rehearsal rack: eight simulated Sparks on this machine (root needed)."""

import time

from invoke import task

from .. import console
from ..rehearsal.rack import RehearsalRack, state_as_dict
from .common import inventory_from, operator_task

DEFAULT_INVENTORY = "inventory/rehearsal"
HELP = {"inventory": f"rehearsal inventory (default: {DEFAULT_INVENTORY})"}
NODE_HELP = {**HELP, "node": "node name, e.g. spark-03"}


def _rack(inventory: str | None) -> RehearsalRack:
    return RehearsalRack(inventory_from(inventory or DEFAULT_INVENTORY), say=console.say)


@task(help=HELP)
@operator_task
def up(c, inventory=None):
    """Boot the rehearsal rack (idempotent; installs its apt packages if missing)."""
    seconds = _rack(inventory).up()
    console.say(f"rehearsal rack up ({seconds:.1f} s)")


@task(help=HELP)
@operator_task
def down(c, inventory=None):
    """Shut the rehearsal rack down and remove its network."""
    _rack(inventory).down()
    console.say("rehearsal rack down")


@task(help={**HELP, "json": "print JSON instead of a table"})
@operator_task
def status(c, inventory=None, json=False):
    """Show each rehearsal node's process, link, sshd and boot count (no SSH)."""
    states = _rack(inventory).status()
    if json:
        console.print_json(state_as_dict(states))
        return
    console.print_table(
        "rehearsal rack", ["node", "address", "running", "link", "sshd", "boots", "last boot",
                           "gpu latched"],
        [[s.name, s.address, s.running, "up" if s.link_up else "CUT", s.ssh_open, s.boots,
          time.strftime("%H:%M:%S", time.localtime(s.last_boot)) if s.last_boot else None,
          s.latched] for s in states])


@task(help=NODE_HELP)
@operator_task
def cut(c, node, inventory=None):
    """Pull a node's network cable (fault injection)."""
    _rack(inventory).cut(node)
    console.say(f"{node}: link cut")


@task(help=NODE_HELP)
@operator_task
def heal(c, node, inventory=None):
    """Plug a node's network cable back in."""
    _rack(inventory).heal(node)
    console.say(f"{node}: link healed")


@task(help=NODE_HELP)
@operator_task
def poweroff(c, node, inventory=None):
    """Pull a node's power cord (every process dies; a latched GPU clears)."""
    _rack(inventory).poweroff(node)
    console.say(f"{node}: powered off")


@task(help=NODE_HELP)
@operator_task
def poweron(c, node, inventory=None):
    """Power a node back on and wait until it boots."""
    _rack(inventory).poweron(node)
    console.say(f"{node}: powered on")


@task(help={**NODE_HELP, "no_wait": "return as soon as the reboot starts"})
@operator_task
def reboot(c, node, inventory=None, no_wait=False):
    """Cleanly reboot a node (systemctl reboot inside) and wait until it is back."""
    _rack(inventory).reboot(node, wait=not no_wait)
    console.say(f"{node}: rebooted")


@task(help={**NODE_HELP, "clear": "clear the latch instead (a full power removal also does)"})
@operator_task
def latch(c, node, inventory=None, clear=False):
    """Latch a node's simulated GPU in the low-clock state (~715 MHz under load)."""
    _rack(inventory).latch(node, on=not clear)
    console.say(f"{node}: GPU {'unlatched' if clear else 'latched in the low-clock state'}")
