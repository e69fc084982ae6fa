"""The rehearsal rack as a whole: up, down, status and the fault verbs, idempotent.

`up` twice leaves one rack; `up` after a killed rack clears what it left (namespaces,
cgroups, half-booted nodes) before booting. Extra nodes (extras.py: bare Sparks outside the
inventory, `add_node` / `wipe` / `remove_node`) are booted, shown and shut down with the
rack, but never written into its known_hosts. The blackhole guard goes in first and stays
after `down` (a packet for a rack that is down is dropped here), and the state file that
tells the fleet layer "the rack is up" exists only between a finished network setup and the
start of `down`.
"""

import json
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from ipaddress import ip_address
from pathlib import Path

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.rehearsal import cx7netplan, hostnet, hostprep, nodefs, nodeproc, pdu
from sparkrack.rehearsal.cabling import Cabling, read_cabling, write_cabling
from sparkrack.rehearsal.extras import ExtraNode, check_extra, read_extras, write_extras
from sparkrack.rehearsal.layout import (
    CGROUP_ROOTS,
    HCAS,
    RACKS,
    NodeLayout,
)
from sparkrack.rehearsal.stubimage import build_stub_images
from sparkrack.rehearsal.switch import Switch, read_switch, write_switch
from sparkrack.rehearsal.twinfile import TWIN_FILE, is_twin, read_twin

BOOT_TIMEOUT = 90.0
LINK_RATES = "etc/gpu-sim/link-rates.json"  # read by roce-mount: each HCA's ports/1/rate
# In the node: until $1 s have passed, wait for every address netplan gave a netdev that has
# a carrier (networkd's 10-netplan-DEV.network, Address=; NetworkManager's
# netplan-DEV.nmconnection, [ipv4] addressN=) to be on it, and for the first one to be in the GID
# table of the simulated HCA over that netdev (rehearsal-roce-follow.service).
FABRIC_SETTLED = r"""
end=$(( $(date +%s) + $1 ))
for file in /run/systemd/network/10-netplan-*.network \
            /run/NetworkManager/system-connections/netplan-*.nmconnection; do
  [ -e "$file" ] || continue
  case $file in
    *.network) dev=${file#/run/systemd/network/10-netplan-}; dev=${dev%.network}
               addresses=$(sed -n 's/^Address=//p' "$file") ;;
    *) dev=$(sed -n 's/^interface-name=//p' "$file")
       addresses=$(sed -n '/^\[ipv4\]/,/^\[/s/^address[0-9]*=\([^,]*\).*/\1/p' "$file") ;;
  esac
  ip -o link show dev "$dev" 2>/dev/null | grep -q LOWER_UP || continue
  for address in $addresses; do
    until ip -o -4 addr show dev "$dev" | grep -q " inet $address "; do
      [ "$(date +%s)" -lt "$end" ] || {
        echo "the network daemon did not put $address on $dev (netplan: /etc/netplan)" >&2
        exit 1; }
      sleep 0.1
    done
  done
  first=$(printf '%s\n' "$addresses" | head -n 1)
  [ -n "$first" ] || continue
  gid=$(IFS=./; set -- $first; printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4")
  for hca in /run/sparkrack-sim/infiniband/*; do
    [ -e "$hca/device/net/$dev" ] || continue
    until grep -qsx "$gid" "$hca"/ports/1/gids/*; do
      [ "$(date +%s)" -lt "$end" ] || {
        echo "the simulated HCA ${hca##*/} did not take $first (rehearsal-roce-follow.service)" >&2
        exit 1; }
      sleep 0.1
    done
  done
done
"""

# In the node: a new host key at $1 (ed25519, comment $3), the recorded one kept at $2 (once:
# a second rekey keeps the first one), sshd restarted; RESTORE_KEY puts $2 back.
NEW_KEY = r"""
[ -e "$2" ] || { cp -p "$1" "$2" && cp -p "$1.pub" "$2.pub"; } || exit 1
rm -f "$1" "$1.pub" && ssh-keygen -q -t ed25519 -N "" -C "$3" -f "$1" && systemctl restart ssh
"""
RESTORE_KEY = r"""
[ -e "$2" ] || exit 0
mv -f "$2" "$1" && mv -f "$2.pub" "$1.pub" && systemctl restart ssh
"""

# In the node: make each path ($1, $3, ...) a link to its target ($2, $4, ...), or no link
# when the target is empty (rehearsal.renderer on a running node; read at its next boot).
LINKS_SCRIPT = r"""
while [ $# -ge 2 ]; do
  if [ -n "$2" ]; then mkdir -p "$(dirname "/$1")" && ln -sfn "$2" "/$1" || exit 1
  elif [ -L "/$1" ]; then rm -f "/$1" || exit 1; fi
  shift 2
done
"""


@dataclass
class NodeState:
    """What `rehearsal.status` shows for one node."""

    name: str
    address: str
    running: bool
    init_pid: int | None
    link_up: bool
    ssh_open: bool
    boots: int
    last_boot: int | None
    latched: bool
    heat_c: float = 0.0  # degrees C added to the air around its GPU (rehearsal.heat)
    cabling: str = ""  # its fabric cable (rehearsal.cable), e.g. "port 0, both paths"
    roce_addr: str = ""
    extra: bool = False  # an extra node (rehearsal.add-node), outside the inventory
    isolated: bool = False  # silent to this machine only (rehearsal.isolate)
    rekeyed: bool = False  # a host key other than the recorded one (rehearsal.rekey)


class RehearsalRack:
    """The local rack described by a rehearsal inventory."""

    def __init__(self, inventory: Inventory, say=print):
        if not inventory.is_rehearsal:
            raise UsageError(f"{inventory.path} is not a rehearsal inventory (rehearsal: true)",
                             fix="pass -i inventory/rehearsal")
        self.inventory = inventory
        self.say = say
        self.layout = layout = RACKS[inventory.vars.rehearsal_rack]
        self.first = layout.number == 1  # extra nodes, the twin and the PDU are rack 1's
        self.nodes = [NodeLayout(n.name, n.address, n.roce_addr, layout) for n in inventory.nodes]
        subnet, fabric = layout.mgmt_subnet, layout.fabric_subnet
        for node in self.nodes:
            if ip_address(node.address) not in subnet:
                raise UsageError(f"{inventory.path}: {node.name} address {node.address} is "
                                 f"outside rehearsal rack {layout.number}'s subnet {subnet}",
                                 fix=f"use {subnet.network_address + node.index} and its "
                                 "neighbours")
            if ip_address(node.roce_addr) not in fabric:
                raise UsageError(f"{inventory.path}: {node.name} roce_addr {node.roce_addr} is "
                                 f"not on rehearsal rack {layout.number}'s fabric {fabric}",
                                 fix=f"give it roce_addr: {fabric.network_address + node.index}")
        self.extras: dict[str, ExtraNode] = {}
        self.twin = None
        if self.first:
            self._load_extras()
            self.twin = read_twin()  # the twin on record, this inventory's or another's

    def _load_extras(self) -> None:
        """The extra nodes on record; one that clashes with the inventory is left out."""
        names = {n.name for n in self.nodes}
        addresses = {n.address for n in self.nodes}
        self.extras = {}
        for name, extra in read_extras().items():
            if name in names or extra.address in addresses:
                self.say(f"note: extra node {name} ({extra.address}) clashes with the "
                         f"inventory {self.inventory.path}: left out")
                continue
            self.extras[name] = extra

    @property
    def extra_nodes(self) -> list[NodeLayout]:
        """The layouts of the extra nodes, by name."""
        return [self.extras[name].layout for name in sorted(self.extras)]

    @property
    def all_nodes(self) -> list[NodeLayout]:
        """The inventory's nodes, then the extra nodes."""
        return [*self.nodes, *self.extra_nodes]

    def node(self, name: str) -> NodeLayout:
        """The layout of one node (inventory or extra) by name (UsageError naming the valid ones)."""
        for node in self.all_nodes:
            if node.name == name:
                return node
        raise UsageError(f"no rehearsal node {name!r}",
                         fix=f"choose one of {', '.join(n.name for n in self.all_nodes)}")

    def _write_files(self, node: NodeLayout, client_pub: str) -> None:
        """A node's files before it boots: an extra node gets its simulated driver version."""
        nodefs.write_if_changed(node.upper / LINK_RATES, self._link_rates(node))
        extra = self.extras.get(node.name)
        if extra is None:
            nodefs.write_node_files(node, self.nodes, client_pub, gpu=self._twin_gpu(node.name))
        else:
            nodefs.host_key(node)  # its own, never this machine's (the overlay's lower /etc/ssh)
            if not (node.upper / "etc/gpu-sim/hardware.json").exists():
                nodefs.write_hardware(node, extra.missing_hcas)
            nodefs.write_kernel(node, extra.kernel)
            nodefs.write_node_files(node, self.all_nodes, client_pub, gpu=extra.gpu)

    # --- the twin ------------------------------------------------------------------------
    def _twin_gpu(self, name: str) -> dict | None:
        """The simulated GPU's keys of a node of this inventory's twin (None: the default)."""
        if self.twin is None or not is_twin(self.inventory.path, self.twin):
            return None
        return self.twin["nodes"].get(name, {}).get("gpu") or None

    def _other_twin_nodes(self) -> list[NodeLayout]:
        """The nodes of a twin on record that is not this inventory (none when there is none)."""
        if not self.first:
            return []
        self.twin = read_twin()
        if self.twin is None or is_twin(self.inventory.path, self.twin):
            return []
        mine = {n.name for n in self.all_nodes}
        try:
            twin = load_inventory(self.twin["inventory"])
            layouts = [NodeLayout(n.name, n.address, n.roce_addr) for n in twin.nodes]
        except SparkrackError:  # its inventory is gone: its nodes by name (disk, processes)
            layouts = [NodeLayout(name, "10.77.1.250") for name in self.twin["nodes"]]
        return [n for n in layouts if n.name not in mine]

    def _leave_other_twin(self) -> None:
        """Before this inventory's rack boots: another twin's node disks (they carry its
        shape) and its record removed; refused while its nodes run."""
        if not self.first:
            return
        self.twin = read_twin()
        if self.twin is None or is_twin(self.inventory.path, self.twin):
            return
        names = list(self.twin["nodes"])
        running = [n for n in names if nodeproc.init_pid(NodeLayout(n, "10.77.1.250"))]
        if running:
            raise UsageError(f"the twin of {self.twin['inventory']} is up ({', '.join(running)})",
                             fix="run `invoke rehearsal.down` first")
        for name in names:
            nodefs.wipe(NodeLayout(name, "10.77.1.250"))
        TWIN_FILE.unlink(missing_ok=True)
        self.twin = None
        self.say(f"removed the twin's node disks ({', '.join(names)}): the rack boots as "
                 f"{self.inventory.path} says")

    # --- up / down -------------------------------------------------------------------
    def up(self) -> float:
        """Boot every node that is not running and wait until all serve SSH; returns seconds."""
        started = time.monotonic()
        self._leave_other_twin()
        missing = hostprep.missing_packages()
        if missing:
            hostprep.install_packages(missing, self.say)
        hostprep.raise_kernel_limits(self.say)
        self._clear_stale()
        hostnet.install_blackhole()
        hostnet.ensure_bridge(self.layout)
        hostnet.ensure_fabric_bridge(self.switch, self.layout)
        client_pub = hostprep.client_key()
        to_boot = [n for n in self.all_nodes if nodeproc.init_pid(n) is None]
        for node in self.all_nodes:
            if node in to_boot:
                self._write_files(node, client_pub)
                if node.name not in self.extras:  # a bare extra node has no weights
                    nodefs.install_stub_model(node, self.inventory.vars.model_path)
            hostnet.ensure_node_net(node, read_cabling(node), self.switch)
        self._write_known_hosts()
        self._write_state()
        for node in to_boot:
            nodeproc.launch(node)
        if to_boot:
            self.say(f"booting {len(to_boot)} node(s): {', '.join(n.name for n in to_boot)}")
        self.wait_booted(self.nodes)
        if self.first:
            pdu.start_agent(self.inventory.path, self.inventory.vars.pdu, self.say)
        if self.extras:
            try:
                self.wait_booted(self.extra_nodes)
            except SparkrackError as error:  # the inventory's rack is up: say, do not fail
                self.say(f"warning: extra node(s) did not come up: {error.line()}")
        for engine, (path, image_id) in build_stub_images(self.inventory).items():
            self.say(f"stub {engine} image {image_id[:19]} at {path} "
                     "(`invoke provision` puts it on the nodes)")
        return time.monotonic() - started

    def down(self) -> None:
        """Shut every node down cleanly, then remove the network; the guard route stays."""
        self.layout.state_file.unlink(missing_ok=True)
        if self.first:
            pdu.stop_agent()  # first: it could power a node on again
        nodes = [*self.all_nodes, *self._other_twin_nodes()]
        with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
            list(pool.map(nodeproc.shutdown, nodes))
        self._clear_stale()
        for node in nodes:
            hostnet.remove_node_net(node)
        if not any(nodeproc.is_running(n) for n in self._all_cgroup_nodes()):
            hostnet.remove_bridge(self.layout)

    def wait_booted(self, nodes: list[NodeLayout], timeout: float = BOOT_TIMEOUT) -> None:
        """Wait until each node's systemd finished booting and its sshd answers."""
        with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
            errors = [e for e in pool.map(lambda n: self._wait_one(n, timeout), nodes) if e]
        if errors:
            raise SparkrackError("; ".join(errors), fix="see `invoke rehearsal.status` and the "
                                 f"node's console log under {self.layout.run_dir}")

    def _wait_one(self, node: NodeLayout, timeout: float) -> str | None:
        """Wait for one node: init up, `systemctl is-system-running` settled, sshd banner."""
        deadline = time.monotonic() + timeout
        state = "not started"
        while time.monotonic() < deadline:
            if nodeproc.init_pid(node) is not None:
                try:
                    state = nodeproc.in_node(node, ["systemctl", "is-system-running"], 5).stdout.strip()
                except (RuntimeError, OSError, subprocess.TimeoutExpired):
                    state = "not booted"
                if state in ("running", "degraded") and ssh_open(node.address):
                    return self._fabric_settled(node, deadline - time.monotonic())
            time.sleep(0.2)
        return f"{node.name} did not come up within {timeout:.0f} s (systemd: {state or 'no answer'}; " \
               f"console: {node.console_log})"

    @staticmethod
    def _fabric_settled(node: NodeLayout, timeout: float) -> str | None:
        """Wait until the node's systemd-networkd holds the fabric addresses its netplan
        config gives each cabled netdev (None), or say which one it does not hold."""
        try:
            done = nodeproc.in_node(node, ["sh", "-c", FABRIC_SETTLED, "sh",
                                           str(max(1, int(timeout)))], timeout + 5)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            return f"{node.name}: fabric addresses not checked: {error}"
        return None if done.returncode == 0 else f"{node.name}: {done.stderr.strip()}"

    def _clear_stale(self) -> None:
        """Power-cut half-dead nodes and drop namespaces/cgroups no running node owns."""
        for node in self._all_cgroup_nodes():
            if nodeproc.is_running(node) and nodeproc.init_pid(node) is None:
                self.say(f"clearing a half-dead node left behind: {node.name}")
                nodeproc.power_cut(node)
            elif not nodeproc.is_running(node):
                for root in node.cgroups():
                    nodeproc.remove_cgroup_tree(root)
        running = {n.netns for n in self._all_cgroup_nodes() if nodeproc.is_running(n)}
        for netns in hostnet.stale_namespaces(self.layout):
            if netns not in running:
                hostnet.ip("netns", "del", netns, check=False)
        for node in self.all_nodes:
            if node.netns not in running:
                for name in hostnet.host_ends(node):
                    if hostnet.link_exists(name):
                        hostnet.ip("link", "del", name, check=False)

    def _all_cgroup_nodes(self) -> list[NodeLayout]:
        """Our nodes plus any node left in the rack's cgroups by an earlier rack."""
        known = {n.name: n for n in self.all_nodes}
        base = CGROUP_ROOTS[0] / self.layout.cgroup_group
        if base.is_dir():
            for entry in base.iterdir():
                if entry.is_dir() and entry.name not in known:
                    known[entry.name] = NodeLayout(entry.name, self._spare_address,
                                                   rack=self.layout)
        return list(known.values())

    def _write_known_hosts(self) -> None:
        """Record every inventory node's host key (generated by us, so trusted by
        construction). Extra nodes stay out: onboarding records theirs."""
        lines = [f"{n.address} {' '.join(nodefs.host_key(n).split()[:2])}\n" for n in self.nodes]
        nodefs.write_if_changed(self.layout.known_hosts, "".join(lines).encode(), 0o644)

    @property
    def _spare_address(self) -> str:
        """An address of the rack's subnet no node of the inventory has (.250), for the
        layout of a node known by name only."""
        return str(self.layout.mgmt_subnet.network_address + 250)

    def _write_state(self) -> None:
        self.layout.run_dir.mkdir(parents=True, exist_ok=True)
        state = {"inventory": str(self.inventory.path),
                 "nodes": {n.name: n.address for n in self.nodes}}
        if self.extras:
            state["extra_nodes"] = {n.name: n.address for n in self.extra_nodes}
        nodefs.write_if_changed(self.layout.state_file, json.dumps(state, indent=1).encode())

    # --- status and faults -------------------------------------------------------------
    def status(self) -> list[NodeState]:
        """One NodeState per node, read from this machine (no SSH)."""
        states = []
        for node in self.all_nodes:
            pid = nodeproc.init_pid(node)
            boots = nodeproc.boot_times(node)
            states.append(NodeState(
                name=node.name, address=node.address, running=pid is not None, init_pid=pid,
                link_up=hostnet.netns_exists(node) and hostnet.link_is_up(node),
                ssh_open=pid is not None and ssh_open(node.address, 0.3),
                boots=len(boots), last_boot=boots[-1] if boots else None,
                latched=node.latch_file.exists() if pid is None else
                nodeproc.in_node(node, ["test", "-e", "/var/lib/gpu-sim/latched"]).returncode == 0,
                heat_c=_heat(node, pid),
                cabling=read_cabling(node).describe(), roce_addr=node.roce_addr,
                extra=node.name in self.extras, isolated=hostnet.is_isolated(node),
                rekeyed=(node.upper / nodefs.KEPT_KEY).exists()))
        return states

    def cut(self, name: str) -> None:
        """Pull every cable of the node (management and fabric): it answers nothing."""
        hostnet.unplug(self.node(name))

    def heal(self, name: str) -> None:
        """Plug the node's cables back in, as it is cabled (and end an isolation)."""
        node = self.node(name)
        hostnet.isolate(node, False)
        powered = nodeproc.init_pid(node) is not None
        hostnet.ensure_node_net(node, read_cabling(node), self.switch, powered=powered)
        if powered and (settled := self._fabric_settled(node, 15)):
            raise SparkrackError(settled)

    def isolate(self, name: str, on: bool = True) -> None:
        """The node falls silent to this machine (the operator's) while its peers still
        reach it, as a partition between the operator and the rack does; on=False ends it."""
        hostnet.isolate(self.node(name), on)

    def rekey(self, name: str, restore: bool = False) -> None:
        """Give the running node a new SSH host key, as a reinstall does (sshd restarted),
        the recorded one kept aside on its disk; restore puts that one back."""
        node = self.node(name)
        done = nodeproc.in_node(node, ["sh", "-c", RESTORE_KEY if restore else NEW_KEY, "sh",
                                       f"/{nodefs.HOST_KEY}", f"/{nodefs.KEPT_KEY}", name])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: the host key was not "
                                 f"{'put back' if restore else 'changed'}: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")

    def poweroff(self, name: str) -> None:
        """Pull the node's power cord: every process dies at once, its ports go dark (no
        reply of any kind to its addresses, as from a real powered-off Spark); a latched
        GPU clears."""
        node = self.node(name)
        nodeproc.power_cut(node)
        hostnet.unplug(node)
        node.latch_file.unlink(missing_ok=True)

    def cable(self, name: str, cabling: Cabling) -> None:
        """Recable the node's ConnectX-7 (port, paths). Kept across reboots and power
        cycles, as a cable is; the node's driver sees it at once."""
        node = self.node(name)
        write_cabling(node, cabling.check())
        running = nodeproc.init_pid(node) is not None
        hostnet.ensure_node_net(node, cabling, self.switch, powered=running)
        if running:
            settled = self._fabric_settled(node, 15)
            if settled:
                raise SparkrackError(settled)
            done = nodeproc.in_node(node, [f"/{nodefs.SIM_LIB}/roce/roce-mount"])
            if done.returncode != 0:
                raise SparkrackError(f"{name}: the driver did not take the new cabling: "
                                     f"{done.stderr.strip() or done.stdout.strip()}")

    # --- the switch --------------------------------------------------------------------
    @property
    def switch(self) -> Switch:
        """The fabric switch: as `rehearsal.switch` left it, else as the inventory says."""
        return read_switch(self.inventory.vars.rehearsal_switch_mtu, self.layout.state_dir)

    def set_switch(self, switch: Switch) -> None:
        """Reconfigure the switch (kept across `down` and `up`, as a switch's config is):
        every port's MTU and pace at once, each running node's HCAs showing their link's
        rate (roce-mount re-run)."""
        write_switch(switch.check(), self.inventory.vars.rehearsal_switch_mtu,
                     self.layout.state_dir)
        if not hostnet.link_exists(self.layout.fabric_bridge):
            return  # the rack is down: `rehearsal.up` sets the switch up as recorded
        hostnet.ensure_fabric_bridge(switch, self.layout)
        for node in self.all_nodes:
            running = nodeproc.init_pid(node) is not None
            hostnet.ensure_node_net(node, read_cabling(node), switch, powered=running)
            if not running:
                nodefs.write_if_changed(node.upper / LINK_RATES, self._link_rates(node))
                continue
            done = nodeproc.in_node(node, [
                "sh", "-c", 'printf "%s" "$1" > "$2.new" && mv "$2.new" "$2" && "$3"', "sh",
                self._link_rates(node).decode(), f"/{LINK_RATES}",
                f"/{nodefs.SIM_LIB}/roce/roce-mount"])
            if done.returncode != 0:
                raise SparkrackError(f"{node.name}: the driver did not take the link rates: "
                                     f"{done.stderr.strip() or done.stdout.strip()}")

    def _link_rates(self, node: NodeLayout) -> bytes:
        """The node's /etc/gpu-sim/link-rates.json: what each HCA's ports/1/rate shows."""
        return (json.dumps(self.switch.node_rates(node.name), indent=1) + "\n").encode()

    def poweron(self, name: str) -> None:
        """Boot a powered-off node and wait for it."""
        node = self.node(name)
        if nodeproc.init_pid(node) is None:
            nodeproc.power_cut(node)
            hostnet.ensure_node_net(node, read_cabling(node), self.switch)
            self._write_files(node, hostprep.client_key())
            nodeproc.launch(node)
        self.wait_booted([node])

    def reboot(self, name: str, wait: bool = True) -> None:
        """A clean `systemctl reboot` of the node; waits until it is back unless told not to."""
        node = self.node(name)
        before = len(nodeproc.boot_times(node))
        nodeproc.reboot(node)
        if not wait:
            return
        deadline = time.monotonic() + BOOT_TIMEOUT
        while len(nodeproc.boot_times(node)) == before:
            if time.monotonic() > deadline:
                raise SparkrackError(f"{name} did not reboot within {BOOT_TIMEOUT:.0f} s")
            time.sleep(0.1)
        time.sleep(0.5)  # let the old init go before waiting on the new one
        self.wait_booted([node])

    def latch(self, name: str, on: bool = True) -> None:
        """Latch (or clear) the node's simulated GPU into the low-clock state."""
        node = self.node(name)
        argv = ["sh", "-c", "mkdir -p /var/lib/gpu-sim && touch /var/lib/gpu-sim/latched"] if on \
            else ["rm", "-f", "/var/lib/gpu-sim/latched"]
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change the latch: {done.stderr.strip()}")

    def nccl_hang(self, name: str, on: bool = True) -> None:
        """Make the node's NCCL hang its next collective, its kernel spinning until the
        process ends (or clear it; a reboot clears it too), as the pip-bundled NCCL build
        did on Sparks (vllm#42354): the rank's peers wait; on every node, every rank spins."""
        argv = ["sh", "-c", "mkdir -p /run/gpu-sim && touch /run/gpu-sim/collective-hang"] \
            if on else ["rm", "-f", "/run/gpu-sim/collective-hang"]
        done = nodeproc.in_node(self.node(name), argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change the collective hang: "
                                 f"{done.stderr.strip()}")

    def heat(self, name: str, degrees: float | None) -> None:
        """Add degrees C to the air around the node's GPU (a blocked vent, a hot room; None:
        clear). Kept on the node's disk until cleared, as a room stays hot across reboots."""
        node = self.node(name)
        argv = ["rm", "-f", HEAT_FILE] if degrees is None else [
            "sh", "-c", 'mkdir -p "${2%/*}" && printf "%s\\n" "$1" > "$2"', "sh",
            f"{degrees:g}", HEAT_FILE]
        if nodeproc.init_pid(node) is None:
            node.heat_file.unlink(missing_ok=True)
            if degrees is not None:
                node.heat_file.parent.mkdir(parents=True, exist_ok=True)
                node.heat_file.write_text(f"{degrees:g}\n")
            return
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not change the heat: {done.stderr.strip()}")

    def reset_clocks(self, name: str) -> None:
        """Drop the node's GPU clock lock as `nvidia-smi -rgc` does (what a driver reload, a
        GPU reset or an out-of-memory event leaves): the cap unit still reads active."""
        done = nodeproc.in_node(self.node(name), ["nvidia-smi", "-rgc"])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: nvidia-smi -rgc failed: "
                                 f"{done.stdout.strip() or done.stderr.strip()}")

    def load_startup(self, name: str, seconds: float | None) -> None:
        """Set how long the node's simulated burn load takes to start (None: the real
        load's 4.4 s). Kept across reboots; the test suite shortens it to save time."""
        node = self.node(name)
        path = "/etc/gpu-sim/load-startup"
        argv = ["rm", "-f", path] if seconds is None else \
            ["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "sh", f"{seconds:g}", path]
        done = nodeproc.in_node(node, argv)
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the load start-up: "
                                 f"{done.stderr.strip()}")

    def cx7_netplan(self, names: list[str], form: str) -> None:
        """Put NVIDIA's /etc/netplan/40-cx7.yaml on each node in one of its public forms
        (cx7netplan.FORMS; `none` removes it), then reboot them at once so that they boot
        with it."""
        nodes = [self.node(name) for name in names]
        for node in nodes:
            try:
                argv = cx7netplan.install_argv(form, node)
            except ValueError as error:
                raise UsageError(f"--cx7-netplan: {error}", fix="e.g. --cx7-netplan link-local") \
                    from None
            done = nodeproc.in_node(node, argv)
            if done.returncode != 0:
                raise SparkrackError(f"{node.name}: could not write /{cx7netplan.PATH}: "
                                     f"{done.stderr.strip()}")
        with ThreadPoolExecutor(len(nodes) or 1) as pool:
            list(pool.map(self.reboot, names))

    def kernel(self, name: str, release: str | None, kho_bug: bool | None = None,
               cmdline: str = "") -> None:
        """The host kernel the node runs (None: DGX OS's): the release `uname -r` reports,
        whether KHO breaks its CMA (None: as public reports say of the release) and the
        parameters added to its command line, so the kernel rules can be rehearsed on an
        inventory node. Kept on its disk; a running node shows the new /proc/cmdline and
        CMA counters at once (its simulated driver reloads)."""
        node = self.node(name)
        try:
            script = nodefs.uname_script(release)
            data = nodefs.kernel_json(release, kho_bug, cmdline)
        except ValueError as error:
            raise UsageError(f"rehearsal.kernel: {error}",
                             fix="e.g. --release 6.17.0-1008-nvidia --cmdline kho=off") from None
        if nodeproc.init_pid(node) is None:
            nodefs.write_kernel(node, release, kho_bug, cmdline)
            return
        write = ('printf "%s" "$1" > "$2.new" && chmod 755 "$2.new" && mv "$2.new" "$2" && '
                 'printf "%s" "$3" > "$4.new" && mv "$4.new" "$4" && '
                 'systemctl reload nvidia-persistenced.service')
        done = nodeproc.in_node(node, ["sh", "-c", write, "sh", script.decode(),
                                       f"/{nodefs.UNAME_PATH}", data.decode(),
                                       f"/{nodefs.KERNEL_PATH}"])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the kernel: {done.stderr.strip()}")

    def renderer(self, name: str, daemon: str) -> None:
        """The network daemon the node's netplan renders with from its next boot on
        (networkd or NetworkManager; the other one's units out). Kept on its disk."""
        node = self.node(name)
        if daemon not in nodefs.DAEMON_UNITS:
            raise UsageError(f"--daemon {daemon}: not a network daemon netplan renders with",
                             fix=f"choose one of {', '.join(nodefs.DAEMON_UNITS)}")
        if daemon == nodefs.NETWORK_MANAGER and not nodefs.has_network_manager():
            raise UsageError("NetworkManager is not installed on this machine (the nodes run "
                             "its programs)", fix="invoke rehearsal.up installs it (its daemon "
                             "kept off this machine)")
        if nodeproc.init_pid(node) is None:
            nodefs.write_network_daemon(node, daemon)
            return
        args = [item or "" for link in nodefs.daemon_links(daemon) for item in link]
        done = nodeproc.in_node(node, ["sh", "-c", LINKS_SCRIPT, "sh", *args])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the network daemon: "
                                 f"{done.stderr.strip()}")

    def netdev_mtu(self, name: str, netdev: str, mtu: int) -> None:
        """Set one of the node's netdevs' MTU, as `ip link set` on the node would (kept while
        the node's network is: across reboots, not a new disk)."""
        done = nodeproc.in_node(self.node(name), ["ip", "link", "set", "dev", netdev, "mtu",
                                                  str(mtu)])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set {netdev}'s MTU to {mtu}: "
                                 f"{done.stderr.strip()}")

    def renumber_gid(self, name: str, index: int | None) -> None:
        """Firmware renumbering of the node's GID tables: the IPv4-mapped RoCE v2 entry moves
        to index (None: back to 3), even or odd. Kept across reboots and power cycles, as
        firmware is."""
        if index is not None and index < 3:
            raise UsageError(f"GID index {index}: 0 and 1 hold the link-local pair and a "
                             "v1 entry comes before its v2", fix="give an index >= 3, e.g. 5")
        self._roce_fault(name, "renumber", "--clear" if index is None else str(index))

    def gid_moves(self, name: str, seed: int) -> None:
        """From the node's next boot on, each boot puts the RoCE v2 IPv4 entry at 3, 5 or 6,
        drawn from seed and the boot's number (as owners see it move across reboots);
        renumber_gid pins it again."""
        self._roce_fault(name, "moves", str(seed))

    def hca_down(self, name: str, hca: str, down: bool = True) -> None:
        """Take one HCA's port down (or up) until a reboot or power cycle: a cable out."""
        if hca not in HCAS:
            raise UsageError(f"unknown HCA {hca}", fix="the nodes have " + ", ".join(HCAS))
        self._roce_fault(name, "down" if down else "up", hca)

    def _roce_fault(self, name: str, *args: str) -> None:
        done = nodeproc.in_node(self.node(name), [f"/{nodefs.SIM_LIB}/roce/roce-fault", *args])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: roce-fault {' '.join(args)} failed: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")

    # --- extra nodes ---------------------------------------------------------------------
    def add_node(self, name: str, address: str, *, driver_version: str | None = None,
                 missing_hcas: tuple[str, ...] | list[str] = (), kernel: str | None = None
                 ) -> NodeLayout:
        """Add a bare node outside the inventory, boot it and wait for its sshd.

        Adding the same node again with the same settings is a no-op (booting it if it is
        down); other settings for a known name are refused."""
        if not self.first:
            raise UsageError(f"extra nodes join rehearsal rack 1, not rack {self.layout.number}",
                             fix="pass -i inventory/rehearsal")
        if REHEARSAL_STATE_FILE.exists() is False:
            raise UsageError("the rehearsal rack is down", fix="run `invoke rehearsal.up` first")
        extra = ExtraNode(name, address, driver_version, tuple(sorted(set(missing_hcas))), kernel)
        known = self.extras.get(name)
        if known is not None:
            if known != extra:
                raise UsageError(f"extra node {name} exists with other settings "
                                 f"({known.describe()})",
                                 fix=f"`invoke rehearsal.remove-node {name}` first")
            if nodeproc.init_pid(known.layout) is None:
                self.poweron(name)
            return known.layout
        check_extra(extra, {n.name for n in self.all_nodes},
                    {n.address for n in self.all_nodes})
        self.extras[name] = extra
        write_extras({**read_extras(), name: extra})
        node = extra.layout
        if nodeproc.is_running(node):  # a leftover of the same name: cut it first
            nodeproc.power_cut(node)
        nodefs.wipe(node)
        self._boot_bare(extra)
        self.say(f"{name}: bare node up at {address} ({extra.describe()}); its host key is "
                 "in no known_hosts")
        return node

    def wipe(self, name: str) -> None:
        """Power an extra node off, delete its disk and boot it bare (a new host key)."""
        extra = self._extra(name, "wipe")
        node = extra.layout
        nodeproc.power_cut(node)
        nodefs.wipe(node)
        self._boot_bare(extra)

    def remove_node(self, name: str) -> None:
        """Power an extra node off, delete its disk and network, forget it."""
        extra = self._extra(name, "remove")
        node = extra.layout
        nodeproc.shutdown(node, timeout=10)
        hostnet.remove_node_net(node)
        nodefs.wipe(node)
        for root in node.cgroups():
            nodeproc.remove_cgroup_tree(root)
        shutil.rmtree(node.run, ignore_errors=True)
        del self.extras[name]
        remaining = read_extras()
        remaining.pop(name, None)
        write_extras(remaining)
        if REHEARSAL_STATE_FILE.exists():
            self._write_state()

    def _extra(self, name: str, verb: str) -> ExtraNode:
        """The extra node called name; UsageError for an inventory node or an unknown one."""
        if name in {n.name for n in self.nodes}:
            raise UsageError(f"{name} is a node of the inventory {self.inventory.path}: only "
                             f"extra nodes can be {verb}d here",
                             fix="add one with `invoke rehearsal.add-node NAME --address ADDR`")
        if name not in self.extras:
            known = ", ".join(sorted(self.extras)) or "none"
            raise UsageError(f"no extra node {name!r} (extra nodes: {known})",
                             fix="add one with `invoke rehearsal.add-node NAME --address ADDR`")
        return self.extras[name]

    def _boot_bare(self, extra: ExtraNode) -> None:
        """Lay down a bare node's files (fresh host key), plug it in, boot it, wait."""
        node = extra.layout
        self._write_files(node, hostprep.client_key())
        hostnet.ensure_node_net(node, read_cabling(node), self.switch)
        self._write_state()
        nodeproc.launch(node)
        self.wait_booted([node])


HEAT_FILE = "/var/lib/gpu-sim/heat"


def _heat(node: NodeLayout, pid: int | None) -> float:
    """The node's heat fault in degrees C (0: none), read from this machine."""
    path = node.heat_file if pid is None else Path(f"/proc/{pid}/root{HEAT_FILE}")
    try:
        return float(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def ssh_open(address: str, timeout: float = 0.5) -> bool:
    """Whether an SSH server answers with its banner at address:22."""
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def state_as_dict(states: list[NodeState]) -> list[dict]:
    """NodeStates as plain dicts for --json."""
    return [asdict(s) for s in states]
