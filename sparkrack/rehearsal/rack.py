"""The rehearsal rack as a whole: up, down, status and its nodes, idempotent; the fault verbs
are its families' (faults/: power, network, GPU, kernel, fabric), one module each.

`up` twice leaves one rack; `up` after a killed rack clears what it left (namespaces,
cgroups, half-booted nodes) before booting. Extra nodes (extranodes.py: bare Sparks outside
the inventory, `add_node` / `wipe` / `remove_node`) are booted, shown and shut down with the
rack, but never written into its known_hosts. The blackhole guard goes in first and stays
after `down` (a packet for a rack that is down is dropped here), and the state file that
tells the fleet layer "the rack is up" exists only between a finished network setup and the
start of `down`. docs/rehearsal.md#faults
"""

import json
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from ipaddress import ip_address

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.rehearsal import hostnet, hostprep, nodefs, nodeproc, pdu
from sparkrack.rehearsal.cabling import read_cabling
from sparkrack.rehearsal.extranodes import ExtraNodes
from sparkrack.rehearsal.extras import ExtraNode, read_extras
from sparkrack.rehearsal.faults.fabric import LINK_RATES, FabricFaults
from sparkrack.rehearsal.faults.gpu import GpuFaults, heat_c, power_limit_w
from sparkrack.rehearsal.faults.kernel import KernelFaults
from sparkrack.rehearsal.faults.network import NetworkFaults
from sparkrack.rehearsal.faults.power import BOOT_TIMEOUT, PowerFaults
from sparkrack.rehearsal.layout import (
    CGROUP_ROOTS,
    RACKS,
    NodeLayout,
)
from sparkrack.rehearsal.stubimage import build_stub_images
from sparkrack.rehearsal.twinfile import TWIN_FILE, is_twin, read_twin

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
    power_limit_w: float = 0.0  # its GPU's firmware power limit (rehearsal.power-limit; 0: none)
    cabling: str = ""  # its fabric cable (rehearsal.cable), e.g. "port 0, both paths"
    roce_addr: str = ""
    extra: bool = False  # an extra node (rehearsal.add-node), outside the inventory
    isolated: bool = False  # silent to this machine only (rehearsal.isolate)
    rekeyed: bool = False  # a host key other than the recorded one (rehearsal.rekey)


class RehearsalRack(ExtraNodes, PowerFaults, NetworkFaults, GpuFaults, KernelFaults,
                    FabricFaults):
    """The local rack described by a rehearsal inventory: its lifecycle here (up, down,
    status, its nodes), its extra nodes (extranodes.py), its faults one family per module
    (faults/)."""

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
                heat_c=heat_c(node, pid), power_limit_w=power_limit_w(node, pid),
                cabling=read_cabling(node).describe(), roce_addr=node.roce_addr,
                extra=node.name in self.extras, isolated=hostnet.is_isolated(node),
                rekeyed=(node.upper / nodefs.KEPT_KEY).exists()))
        return states


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
