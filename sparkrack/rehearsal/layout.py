"""Where the rehearsal rack keeps things, and how each node's pieces are named."""

from dataclasses import dataclass
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
class NodeLayout:
    """The names and paths of one rehearsal node, derived from its name and address."""

    name: str
    address: str
    roce: str = ""  # its fabric address (roce_addr); '' : 10.77.3.<index>

    @property
    def index(self) -> int:
        """The node's number from its address (10.77.1.11 -> 11), unique on the bridge."""
        return ip_address(self.address).packed[-1]

    @property
    def roce_addr(self) -> str:
        """Its address on the fabric (path a of the cabled port)."""
        return self.roce or str(FABRIC_SUBNET.network_address + self.index)

    @property
    def netns(self) -> str:
        return f"sr-{self.name}"

    @property
    def host_veth(self) -> str:
        return f"srv{self.index}"

    @property
    def twin_addr(self) -> str:
        """Path b's address (roce_twin_addr): roce_addr's host number on TWIN_SUBNET."""
        return str(TWIN_SUBNET.network_address + ip_address(self.roce_addr).packed[-1])

    def fabric_veth(self, port: int, path: str) -> str:
        """This machine's end of one RoCE function's cable (srf11-0a)."""
        return f"srf{self.index}-{port}{path}"

    @property
    def cabling_file(self) -> Path:
        """How the node is cabled (rehearsal.cable): outside its disk, kept as a cable is."""
        return self.state / "cabling.json"

    @property
    def state(self) -> Path:
        return STATE_DIR / "nodes" / self.name

    @property
    def upper(self) -> Path:
        return self.state / "upper"

    @property
    def work(self) -> Path:
        return self.state / "work"

    @property
    def run(self) -> Path:
        return RUN_DIR / self.name

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
        return [root / CGROUP_GROUP / self.name for root in CGROUP_ROOTS]
