"""Where a rehearsal rack keeps things, and how each node's pieces are named: rack 1 (the
names and addresses below), or a second rack beside it on this machine (RACKS[2]: its own
management and fabric addresses, bridges, cgroups and state; docs/rehearsal.md#two-racks).
"""

from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from pathlib import Path

from sparkrack.fleet.netguard import (
    REHEARSAL_BRIDGE,
    REHEARSAL_STATE_FILE,
    REHEARSAL_SUBNET,
)

STATE_DIR = Path("/var/lib/sparkrack/rehearsal")
RUN_DIR = REHEARSAL_STATE_FILE.parent
SSH_DIR = STATE_DIR / "ssh"
CLIENT_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
EXTRA_NODES_FILE = STATE_DIR / "extra-nodes.json"  # nodes outside the inventory (add-node)
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
CGROUP_GROUP = "sparkrack-rehearsal"
BRIDGE = REHEARSAL_BRIDGE
BRIDGE_ADDR = "10.77.1.254/24"
# The rack's PDU on the management network: an address of this machine's on the bridge,
# where the rehearsal PDU's SNMP agent listens (rehearsal/pdu.py)
PDU_ADDR = "10.77.1.2"
PDU_PORT = 161
SUBNET = REHEARSAL_SUBNET
# The management network (SSH, docker API, the engines' HTTP API): a Spark's 10 GbE port,
# at the default MTU (no public source shows jumbo frames on it).
MGMT_NETDEV = "enP7s7"
MGMT_MTU = 1500
# The fabric: a Spark's ConnectX-7 has two QSFP ports, each reached over two PCIe x4 paths;
# each (port, path) is one RoCE function with its own netdev (as `ibdev2netdev` lists them).
FUNCTIONS = {  # (port, path) -> (HCA, netdev)
    (0, "a"): ("rocep1s0f0", "enp1s0f0np0"),
    (0, "b"): ("roceP2p1s0f0", "enP2p1s0f0np0"),
    (1, "a"): ("rocep1s0f1", "enp1s0f1np1"),
    (1, "b"): ("roceP2p1s0f1", "enP2p1s0f1np1"),
}
HCAS = dict(FUNCTIONS.values())  # HCA -> netdev
FABRIC_BRIDGE = "srfab0"  # the fabric's switch: no address of this machine's on it
FABRIC_SUBNET = ip_network("10.77.3.0/24")  # path a of the cabled port: the node's roce_addr
TWIN_SUBNET = ip_network("10.77.4.0/24")  # path b (the twin netdev): the same host number




@dataclass(frozen=True)
class RackLayout:
    """Where one rehearsal rack of this machine keeps things and what it calls them."""

    number: int
    state_dir: Path
    run_dir: Path
    cgroup_group: str
    bridge: str
    bridge_addr: str  # this machine's address on the management network, with its prefix
    pdu_addr: str
    fabric_bridge: str
    fabric_subnet: object  # IPv4Network: path a of the cabled port (roce_addr)
    twin_subnet: object  # path b
    prefix: str  # of its namespaces (PREFIX-NAME) and this machine's ends of its cables

    @property
    def state_file(self) -> Path:
        """Exists while the rack is up (the network guard reads rack 1's)."""
        return self.run_dir / REHEARSAL_STATE_FILE.name

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "ssh" / "known_hosts"

    @property
    def mgmt_subnet(self):
        return ip_network(self.bridge_addr, strict=False)

    @property
    def host_addr(self) -> str:
        """This machine's address on the rack's management network."""
        return self.bridge_addr.split("/")[0]


RACKS = {
    1: RackLayout(1, STATE_DIR, RUN_DIR, CGROUP_GROUP, BRIDGE, BRIDGE_ADDR, PDU_ADDR,
                  FABRIC_BRIDGE, FABRIC_SUBNET, TWIN_SUBNET, "sr"),
    # a second rack: the same host numbers on subnets 10 above rack 1's, inside the
    # rehearsal subnet (the blackhole and the network guard cover it)
    2: RackLayout(2, STATE_DIR.with_name("rehearsal-2"), RUN_DIR.with_name(RUN_DIR.name + "-2"),
                  CGROUP_GROUP + "-2", "srbr2", "10.77.11.254/24", "10.77.11.2", "srfab2",
                  ip_network("10.77.13.0/24"), ip_network("10.77.14.0/24"), "s2"),
}


@dataclass(frozen=True)
class NodeLayout:
    """The names and paths of one rehearsal node, derived from its name, address and rack."""

    name: str
    address: str
    roce: str = ""  # its fabric address (roce_addr); '' : the rack's fabric subnet .<index>
    rack: RackLayout = field(default_factory=lambda: RACKS[1])

    @property
    def index(self) -> int:
        """The node's number from its address (10.77.1.11 -> 11), unique on the bridge."""
        return ip_address(self.address).packed[-1]

    @property
    def roce_addr(self) -> str:
        """Its address on the fabric (path a of the cabled port)."""
        return self.roce or str(self.rack.fabric_subnet.network_address + self.index)

    @property
    def netns(self) -> str:
        return f"{self.rack.prefix}-{self.name}"

    @property
    def host_veth(self) -> str:
        return f"{self.rack.prefix}v{self.index}"

    @property
    def twin_addr(self) -> str:
        """Path b's address (roce_twin_addr): roce_addr's host number on TWIN_SUBNET."""
        return str(self.rack.twin_subnet.network_address + ip_address(self.roce_addr).packed[-1])

    def fabric_veth(self, port: int, path: str) -> str:
        """This machine's end of one RoCE function's cable (srf11-0a)."""
        return f"{self.rack.prefix}f{self.index}-{port}{path}"

    @property
    def cabling_file(self) -> Path:
        """How the node is cabled (rehearsal.cable): outside its disk, kept as a cable is."""
        return self.state / "cabling.json"

    @property
    def state(self) -> Path:
        return self.rack.state_dir / "nodes" / self.name

    @property
    def upper(self) -> Path:
        return self.state / "upper"

    @property
    def work(self) -> Path:
        return self.state / "work"

    @property
    def run(self) -> Path:
        return self.rack.run_dir / self.name

    @property
    def root(self) -> Path:
        return self.run / "root"

    @property
    def launcher_pid(self) -> Path:
        return self.run / "launcher.pid"

    @property
    def console_log(self) -> Path:
        return self.run / "console.log"

    @property
    def boots_log(self) -> Path:
        """One line per boot of this node (epoch seconds), appended by the launcher."""
        return self.state / "boots.log"

    @property
    def latch_file(self) -> Path:
        """The simulated low-clock latch, as the node sees it: survives reboot, not power-off."""
        return self.upper / "var/lib/gpu-sim/latched"

    @property
    def heat_file(self) -> Path:
        """Degrees C the rack adds to the air around the node's GPU (rehearsal.heat)."""
        return self.upper / "var/lib/gpu-sim/heat"

    def cgroups(self) -> list[Path]:
        return [root / self.rack.cgroup_group / self.name for root in CGROUP_ROOTS]
