"""Where the rehearsal rack keeps things, and how each node's pieces are named."""

from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from ..fleet.netguard import REHEARSAL_BRIDGE, REHEARSAL_STATE_FILE, REHEARSAL_SUBNET

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
SUBNET = REHEARSAL_SUBNET
MTU = 9000
NODE_NETDEV = "enp1s0f0np0"
TWIN_NETDEV = "enP2p1s0f0np0"
HCAS = {"rocep1s0f0": NODE_NETDEV, "roceP2p1s0f0": TWIN_NETDEV}


@dataclass(frozen=True)
class NodeLayout:
    """The names and paths of one rehearsal node, derived from its name and address."""

    name: str
    address: str

    @property
    def index(self) -> int:
        """The node's number from its address (10.77.1.11 -> 11), unique on the bridge."""
        return ip_address(self.address).packed[-1]

    @property
    def netns(self) -> str:
        return f"sr-{self.name}"

    @property
    def host_veth(self) -> str:
        return f"srv{self.index}"

    @property
    def twin_address(self) -> str:
        """The second twin's address: the same host number on 10.77.2.0/24."""
        return f"10.77.2.{self.index}"

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

    def cgroups(self) -> list[Path]:
        return [root / CGROUP_GROUP / self.name for root in CGROUP_ROOTS]
