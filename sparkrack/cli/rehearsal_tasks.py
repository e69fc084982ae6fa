"""The rehearsal rack: eight simulated Sparks on this machine.

The `rehearsal` collection (root needed): the rack up and down, faults to inject, extra
nodes, and the stub engines' images and model directory (`rehearsal.stub-images`,
`rehearsal.stub-model`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparkrack.cli.common import inventory_from, operator_task
from sparkrack.cli.flags import LIMIT_HELP, RENAMED_LIMIT, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = "rehearsal"

DEFAULT_INVENTORY = "inventory/rehearsal"
HELP = {"inventory": f"rehearsal inventory (default: {DEFAULT_INVENTORY})"}
NODE_HELP = {**HELP, "node": "node name, e.g. spark-03"}
MAX_HEAT_C = 54.0  # more and a loaded GB10 passes its 100 C shutdown
MIN_LIMIT_W, MAX_LIMIT_W = 10.0, 86.0  # a GB10 idles at ~4 W, draws 84-89 W at full load

if TYPE_CHECKING:
    from sparkrack.rehearsal.rack import RehearsalRack


def _rack(inventory: str | None) -> RehearsalRack:
    from sparkrack.rehearsal.rack import RehearsalRack

    return RehearsalRack(inventory_from(inventory or DEFAULT_INVENTORY), say=console.say)


RACKS_HELP = ("how many racks: 2 also boots (or stops) the second rack beside this one, "
              "from the inventory folder named like this one with -2 (inventory/rehearsal-2)")


def _racks(inventory: str | None, racks: int) -> list[RehearsalRack]:
    """The rack of inventory and, for racks 2, the second one beside it."""
    from pathlib import Path

    from sparkrack.core.errors import UsageError

    if racks not in (1, 2):
        raise UsageError(f"--racks {racks}: this machine runs one or two rehearsal racks",
                         fix="give --racks 1 or --racks 2")
    first = _rack(inventory)
    if racks == 1:
        return [first]
    second = first.inventory.path.with_name(first.inventory.path.name + "-2")
    if not (second / "hosts.yml").is_file():
        raise UsageError(f"--racks 2: no second rack's inventory at {second}",
                         fix="copy inventory/rehearsal-2 there")
    return [first, _rack(str(Path(second)))]


CX7_HELP = ("NVIDIA's /etc/netplan/40-cx7.yaml: link-local (the playbook's: link-local IPv4 "
            "on both ports' first path), static (the switch playbook's: addresses on port 0's "
            "two paths) or none")


@task(help={**HELP, "cx7_netplan": "boot every node with " + CX7_HELP,
            "twin": "boot the twin of this capture (`invoke facts.capture --out "
                             "FILE` of your rack) in place of the standard rack",
            "twin_inventory": "where the twin's inventory goes (default: inventory/twin)",
            "racks": RACKS_HELP})
@operator_task
def up(c, inventory=None, twin=None, twin_inventory="inventory/twin", cx7_netplan=None,
       racks=1):
    """Boot the rehearsal rack, or with --twin the twin of your rack.

    Idempotent; installs its apt packages if missing. The twin has your rack's node names,
    ranks, kernels, drivers, GID layouts and cabling, with its inventory written for plan,
    check, up, roll and onboard."""
    if twin:
        from pathlib import Path

        from sparkrack.rehearsal.twin.build import build_twin
        from sparkrack.rehearsal.twin.capture import read

        capture = read(Path(twin))
        started = time.monotonic()
        rack = build_twin(capture, Path(inventory or DEFAULT_INVENTORY), Path(twin_inventory),
                          say=console.say)
        console.say(f"the twin of {capture['rack'].get('rack_name', '?')} is up: "
                    f"{len(rack.nodes)} nodes ({time.monotonic() - started:.1f} s); its "
                    f"inventory: {twin_inventory} (export SPARKRACK_INVENTORY={twin_inventory}, "
                    "then `invoke provision`)")
        return
    rack, *more = _racks(inventory, int(racks))
    seconds = rack.up()
    console.say(f"rehearsal rack up ({seconds:.1f} s)")
    for other in more:
        console.say(f"rehearsal rack {other.layout.number} ({other.inventory.path}) up "
                    f"({other.up():.1f} s)")
    if more:
        from sparkrack.rehearsal.fleetrouter import start_router

        start_router(rack.inventory.path, console.say)
    if cx7_netplan:
        rack.cx7_netplan([node.name for node in rack.nodes], cx7_netplan)
        console.say(f"every node rebooted with NVIDIA's 40-cx7.yaml: {cx7_netplan}")


@task(help={**HELP, "racks": RACKS_HELP})
@operator_task
def down(c, inventory=None, racks=1):
    """Shut the rehearsal rack down and remove its network."""
    chosen = _racks(inventory, int(racks))
    if len(chosen) > 1:
        from sparkrack.rehearsal.fleetrouter import stop_router

        stop_router()
    for rack in reversed(chosen):
        rack.down()
        console.say(f"rehearsal rack {rack.layout.number} down" if rack.layout.number != 1
                    else "rehearsal rack down")


@task(help={**HELP, "json": "print JSON instead of a table"})
@operator_task
def status(c, inventory=None, json=False):
    """Show each rehearsal node's process, link, sshd and boot count (no SSH)."""
    from sparkrack.rehearsal.rack import state_as_dict

    states = _rack(inventory).status()
    if json:
        console.print_json(state_as_dict(states))
        return
    console.print_table(
        "rehearsal rack", ["node", "address", "fabric", "cable", "running", "link", "sshd",
                           "boots", "last boot", "gpu latched"],
        [[f"{s.name} (extra)" if s.extra else s.name, s.address, s.roce_addr, s.cabling,
          s.running, "CUT" if not s.link_up else "ISOLATED" if s.isolated else "up",
          "NEW KEY" if s.rekeyed else s.ssh_open, s.boots,
          time.strftime("%H:%M:%S", time.localtime(s.last_boot)) if s.last_boot else None,
          s.latched] for s in states])


def _node_task(method: str, done: str, doc: str):
    """The task `rehearsal.METHOD NODE`: the rack's method(node), then `NODE: done`."""
    def body(c, node, inventory=None):
        getattr(_rack(inventory), method)(node)
        console.say(f"{node}: {done}")

    body.__name__ = body.__qualname__ = method
    body.__doc__ = doc
    return task(help=NODE_HELP)(operator_task(body))


cut = _node_task("cut", "link cut",
                 "Pull every cable of a node, management and fabric (fault injection).")
heal = _node_task("heal", "link healed", "Plug a node's cables back in, as it is cabled.")
poweroff = _node_task("poweroff", "powered off",
                      "Pull a node's power cord (every process dies; a latched GPU clears).")
poweron = _node_task("poweron", "powered on", "Power a node back on and wait until it boots.")
wipe = _node_task("wipe", "wiped and booted bare (new host key)",
                  "Wipe an extra node back to bare, with a new host key.\n\nPower off, "
                  "delete its disk, boot it.")
remove_node = _node_task("remove_node", "removed",
                         "Power an extra node off and delete it (disk, network, record).")


@task(help={**NODE_HELP, "no_wait": "return as soon as the reboot starts"})
@operator_task
def reboot(c, node, inventory=None, no_wait=False):
    """Cleanly reboot a node (systemctl reboot) and wait until it is back."""
    _rack(inventory).reboot(node, wait=not no_wait)
    console.say(f"{node}: rebooted")


@task(help={**NODE_HELP, "clear": "end it (so does rehearsal.heal)"})
@operator_task
def isolate(c, node, inventory=None, clear=False):
    """A partition: a node silent to this machine, its peers still reach it."""
    _rack(inventory).isolate(node, on=not clear)
    console.say(f"{node}: reachable from this machine again" if clear else
                f"{node}: silent to this machine, reachable from its peers")


@task(help={**NODE_HELP, "restore": "put the recorded host key back"})
@operator_task
def rekey(c, node, inventory=None, restore=False):
    """Give a node a new SSH host key, as a reinstall does (sshd restarted)."""
    _rack(inventory).rekey(node, restore=restore)
    console.say(f"{node}: recorded host key back" if restore else
                f"{node}: new host key (known_hosts still records the old one)")


@task(help={**NODE_HELP, "clear": "clear the latch instead (a full power removal also does)"})
@operator_task
def latch(c, node, inventory=None, clear=False):
    """Latch a node's simulated GPU low (482-858 MHz under load)."""
    _rack(inventory).latch(node, on=not clear)
    console.say(f"{node}: GPU {'unlatched' if clear else 'latched in the low-clock state'}")


@task(help={**NODE_HELP, "clear": "end it (so does a reboot)"})
@operator_task
def nccl_hang(c, node, inventory=None, clear=False):
    """Hang a node's next NCCL collective: its kernel spins, its peers wait.

    As the pip-bundled NCCL build did on Sparks (vllm#42354): the rank reads ~96 % at
    16-27 W while its group makes no progress, until the engine's own watchdog. Given on
    every node, every rank spins (NCCL's hang on every rank)."""
    _rack(inventory).nccl_hang(node, on=not clear)
    console.say(f"{node}: NCCL " + ("no longer hangs" if clear else
                                    "hangs its next collective (its kernel spins)"))


@task(help=NODE_HELP)
@operator_task
def wedge_host(c, node, inventory=None):
    """Wedge a node as unified-memory exhaustion does: powered and silent.

    As GB10 hosts wedged after NVRM's NV_ERR_NO_MEMORY (open-gpu-kernel-modules#1358): no
    OOM kill, every process stopped (SSH connects and never answers, nvidia-smi hangs), its
    PDU outlet still drawing. Only a power cycle ends it (rehearsal.poweroff/poweron or the
    PDU's outlet)."""
    from sparkrack.rehearsal.faults.kernel import wedged_w

    rack = _rack(inventory)
    rack.wedge_host(node)
    console.say(f"{node}: wedged (its processes frozen, its outlet drawing "
                f"{wedged_w(rack.node(node)):.0f} W); only a power cycle ends it")


@task(help={**NODE_HELP, "degrees": "degrees C added to the air around the GPU (1-54: a "
            "blocked vent, a hot room)", "clear": "take the heat away"})
@operator_task
def heat(c, node, inventory=None, degrees=None, clear=False):
    """Heat a node's simulated GPU by --degrees, or --clear it.

    Under load the GPU slows itself to hold its T.Limit (95 C); past that the hardware
    halves its clock (54: over its slowdown temperature, 97 C)."""
    if clear == (degrees is not None):
        raise UsageError("give --degrees N or --clear", fix="e.g. --degrees 40")
    value = None
    if degrees is not None:
        try:
            value = float(degrees)
        except ValueError:
            value = -1.0
        if not 1 <= value <= MAX_HEAT_C:
            raise UsageError(f"--degrees {degrees}: not 1 to {MAX_HEAT_C:g}",
                             fix=f"e.g. --degrees 40 (past {MAX_HEAT_C:g} a GB10 reaches its "
                             "100 C shutdown)")
    _rack(inventory).heat(node, value)
    console.say(f"{node}: GPU air " + ("back to normal" if value is None else f"+{value:g} C"))


@task(help={**NODE_HELP, "watts": f"watts the GPU is held to ({MIN_LIMIT_W:g}-{MAX_LIMIT_W:g}: "
            "30 slows its rank ~1.5 times)", "clear": "lift the limit"})
@operator_task
def power_limit(c, node, inventory=None, watts=None, clear=False):
    """Hold a node's GPU to --watts, as a board's firmware power limit does.

    Its clock drops until the draw fits, nvidia-smi showing no limit (as owners report);
    its rank's steps, and so its whole TP group's, take longer."""
    if clear == (watts is not None):
        raise UsageError("give --watts N or --clear", fix="e.g. --watts 30")
    value = None
    if watts is not None:
        try:
            value = float(watts)
        except ValueError:
            value = -1.0
        if not MIN_LIMIT_W <= value <= MAX_LIMIT_W:
            raise UsageError(f"--watts {watts}: not {MIN_LIMIT_W:g} to {MAX_LIMIT_W:g}",
                             fix=f"e.g. --watts 30 (a GB10 draws ~{MAX_LIMIT_W:g} W at full "
                             "load: a limit above it holds nothing)")
    _rack(inventory).power_limit(node, value)
    console.say(f"{node}: GPU " + ("power limit lifted" if value is None
                                   else f"held to {value:g} W by its firmware"))


@task(help=NODE_HELP)
@operator_task
def reset_clocks(c, node, inventory=None):
    """Drop a node's GPU clock lock, as `nvidia-smi -rgc` does.

    As a driver reload, a GPU reset or an out-of-memory event leaves it: the clock-cap unit
    still reads active, the GPU is uncapped."""
    _rack(inventory).reset_clocks(node)
    console.say(f"{node}: GPU clock lock reset (nvidia-smi -rgc): uncapped")


@task(help={**NODE_HELP, "index": "the GID index the IPv4-mapped RoCE v2 entry moves to "
            "(>= 3)", "clear": "back to index 3",
            "moving": "SEED: from the next boot on, each boot draws the index from 3, 5 "
            "and 6 (seeded: the same seed, the same sequence)"})
@operator_task
def renumber_gid(c, node, inventory=None, index=None, clear=False, moving=None):
    """Renumber a node's GID tables, or let them move at each boot.

    As firmware can."""
    if [clear, index is not None, moving is not None].count(True) != 1:
        raise UsageError("give one of --index N, --moving SEED or --clear",
                         fix=f"e.g. invoke rehearsal.renumber-gid {node} --index 5")
    if moving is not None:
        _rack(inventory).gid_moves(node, moving)
        console.say(f"{node}: from its next boot on, each boot puts the RoCE v2 IPv4 GID at "
                    "3, 5 or 6")
        return
    _rack(inventory).renumber_gid(node, None if clear else index)
    console.say(f"{node}: RoCE v2 IPv4 GID at index {3 if clear else index}")


@task(help={**NODE_HELP, "form": CX7_HELP})
@operator_task
def cx7_netplan(c, node, form, inventory=None):
    """Reboot a node with NVIDIA's own ConnectX-7 netplan file.

    In one of its public forms."""
    _rack(inventory).cx7_netplan([node], form)
    console.say(f"{node}: rebooted with NVIDIA's 40-cx7.yaml: {form}")


@task(help={**NODE_HELP, "release": "the kernel release `uname -r` reports, e.g. "
            "7.0.0-1019-nvidia", "clear": "back to DGX OS's kernel, 6.17.0-1008-nvidia",
            "kho_bug": "yes: KHO leaves CmaTotal 0 and ibv_reg_mr fails (ENOMEM); no: it "
            "does not (default: yes for 7.0.0-1019-nvidia, as public reports say)",
            "cmdline": "parameters added to the kernel command line, e.g. kho=off"})
@operator_task
def kernel(c, node, release=None, clear=False, kho_bug=None, cmdline="", inventory=None):
    """Set the host kernel a node runs (kept on its disk).

    Its release, its KHO behaviour and command line, so /proc/cmdline and the CMA counters
    match, to rehearse the kernel rules."""
    if clear == (release is not None):
        raise UsageError("give --release RELEASE or --clear",
                         fix=f"e.g. invoke rehearsal.kernel {node} --release 7.0.0-1019-nvidia")
    if kho_bug not in (None, "yes", "no"):
        raise UsageError(f"--kho-bug {kho_bug}: yes or no", fix="e.g. --kho-bug yes")
    _rack(inventory).kernel(node, None if clear else release,
                            None if kho_bug is None else kho_bug == "yes", cmdline or "")
    console.say(f"{node}: runs {release or 'the DGX OS kernel'}"
                + (f" with {cmdline}" if cmdline else ""))


@task(help={**NODE_HELP, "daemon": "networkd (the default) or NetworkManager (as NVIDIA's "
            "performance guide sets it)"})
@operator_task
def renderer(c, node, daemon, inventory=None):
    """Set the network daemon a node's netplan renders with.

    From its next boot on (kept on its disk), to rehearse the fabric under NetworkManager."""
    _rack(inventory).renderer(node, daemon)
    console.say(f"{node}: {daemon} from its next boot (invoke rehearsal.reboot {node})")


@task(help={**NODE_HELP, "hca": "the HCA, e.g. roceP2p1s0f0", "clear": "bring the port back up"})
@operator_task
def hca_down(c, node, hca, clear=False, inventory=None):
    """Take one HCA's port down (cable out) until --clear or a reboot.

    A power cycle clears it too."""
    _rack(inventory).hca_down(node, hca, down=not clear)
    console.say(f"{node}: {hca} port {'up' if clear else 'down'}")


@task(help={**NODE_HELP, "port": "the ConnectX-7 port the cable sits in: 0 or 1 (default 0)",
            "paths": "both: an approved QSFP112 cable (default); one: only one PCIe path "
            "comes up; none: no cable",
            "rate": "limit the node's rails to this many Mbit/s (a link trained low)"})
@operator_task
def cable(c, node, port=0, paths="both", rate=None, inventory=None):
    """Recable a node's fabric port (kept across reboots, as a cable is).

    Power cycles keep it too."""
    from sparkrack.rehearsal.cabling import Cabling

    cabling = Cabling(port, str(paths), rate)
    _rack(inventory).cable(node, cabling)
    console.say(f"{node}: cabled {cabling.describe()}: "
                f"{', '.join(cabling.functions_up()) or 'no RoCE function'} up")


@task(help={**HELP, "mtu": "every switch port's MTU (a switch ships at 1500; jumbo: 9000)",
            "port": "one node's link, NODE:HCA, e.g. spark-03:rocep1s0f0 (with --rate)",
            "rate": "the Gbit/s that link negotiated: 200, or 100 on a 400G->4x100G breakout",
            "reset": "back to the switch as the inventory says the operator set it up "
                     "(rehearsal_switch_mtu, every link at 200G)"})
@operator_task
def switch(c, mtu=None, port=None, rate=None, reset=False, inventory=None):
    """Configure the fabric switch (port MTU, link rates), or show it.

    Kept across `rehearsal.down` and `up`, as a switch keeps its config; without flags, show
    it."""
    from sparkrack.rehearsal.switch import Switch

    rack = _rack(inventory)
    if (port is None) != (rate is None):
        raise UsageError("give --port and --rate together",
                         fix="e.g. invoke rehearsal.switch --port spark-03:rocep1s0f0 --rate 100")
    new = Switch(rack.inventory.vars.rehearsal_switch_mtu) if reset else rack.switch
    if mtu is not None:
        new = Switch(mtu, new.rates)
    if port is not None:
        new = new.with_rate(str(port), rate, [n.name for n in rack.nodes])
    if new != rack.switch:
        rack.set_switch(new)
    console.say(f"switch: {new.describe()}")


@task(name="pdu-load", help={**HELP, "outlet": "a PDU outlet no node is on, e.g. 10",
                             "watts": "what the load draws (0: unplug it)"})
@operator_task
def pdu_load(c, outlet, watts, inventory=None):
    """Plug a load that is no node into a free outlet of the rehearsal PDU.

    A switch, a monitor, a heater: the PDU measures it, the projection does not know it."""
    from sparkrack.rehearsal import pdu

    rack = _rack(inventory)
    number, draw = outlet, watts
    pdu.plug_load(rack.inventory.vars.pdu, number, draw)
    console.say(f"PDU outlet {number}: {f'{draw} W load plugged in' if draw else 'unplugged'}")


@task(iterable=["missing_hca"],
      help={**HELP, "name": "the new node's name, e.g. spark-09",
            "address": "its address on the rehearsal bridge, e.g. 10.77.1.19",
            "driver_version": "simulated NVIDIA driver (default: the rack's, 580.126.09)",
            "missing_hca": "an HCA the node lacks, e.g. roceP2p1s0f0 (repeatable)",
            "kernel": "simulated host kernel release that `uname -r` reports"})
@operator_task
def add_node(c, name, address, driver_version=None, missing_hca=None, kernel=None,
             inventory=None):
    """Add a bare node outside the inventory and boot it.

    OS, sshd, docker, simulated GPU/HCAs; no sparkrack files, images or weights; its host
    key in no known_hosts."""
    _rack(inventory).add_node(name, address, driver_version=driver_version,
                              missing_hcas=tuple(missing_hca or ()), kernel=kernel)


@task(help={**HELP, "force": "rebuild even if the inputs did not change",
            "json": "print JSON for scripts"})
@operator_task
def stub_images(c, inventory=None, force=False, json=False):
    """Build the stub engine images (deterministic docker-save tars).

    Into /var/lib/sparkrack/rehearsal/images; rebuilt only when their inputs change."""
    from sparkrack.rehearsal.stubimage import (
        IMAGES_DIR,
        StubImageError,
        build_stub_images,
    )

    try:
        built = build_stub_images(inventory_from(inventory or DEFAULT_INVENTORY), force=force)
    except StubImageError as error:
        raise UsageError(str(error), fix="run on Debian with python3.11 installed") from None
    rows = [[engine, path.name, image_id, path.stat().st_size]
            for engine, (path, image_id) in built.items()]
    if json:
        console.print_json({engine: {"path": str(path), "image_id": image_id,
                                     "size": path.stat().st_size}
                            for engine, (path, image_id) in built.items()})
        return
    console.print_table(f"stub images in {IMAGES_DIR}", ["engine", "tar", "image id", "bytes"],
                        rows)


@task(renamed=RENAMED_LIMIT, help={
    **HELP, "config": "sparkrack-stub.json content: a JSON object or a file holding one "
                      "(default: none, the stub's defaults)",
            "limit": LIMIT_HELP})
@operator_task
def stub_model(c, inventory=None, config=None, limit=None):
    """Write the stub model directory on the rehearsal nodes.

    At the inventory's model_path: config.json, fake shards, manifest, sparkrack-stub.json."""
    from sparkrack.fleet import Fleet
    from sparkrack.rehearsal.stub.config import StubConfigError
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    rack = inventory_from(inventory or DEFAULT_INVENTORY)
    data = None
    if config:
        text = Path(config).read_text() if Path(config).is_file() else config
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"--config is not JSON: {error}",
                             fix='e.g. --config \'{"load_delay_s": 2}\'') from None
    with Fleet(rack, rack.select(limit)) as fleet:
        try:
            write_stub_model(fleet, data)
        except StubConfigError as error:
            raise UsageError(str(error), fix="see sparkrack/rehearsal/stub/config.py") from None
        console.say(f"stub model written to {rack.vars.model_path} on "
                    f"{', '.join(n.name for n in fleet.nodes)}")
