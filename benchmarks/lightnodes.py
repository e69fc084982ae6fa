"""Light rehearsal nodes for benchmarks: a network namespace plus sshd, no systemd, no docker.

They hang off the rehearsal rack's bridge on 10.77.3.0/24 (inside the guarded subnet), so
the rehearsal rack must be up. Each starts in well under a second; all share one host key.
"""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sparkrack.rehearsal import hostnet
from sparkrack.rehearsal.layout import BRIDGE, CLIENT_KEY

SUBNET_PREFIX = "10.77.3."
BRIDGE_ADDR = "10.77.3.254/24"


class LightNodes:
    """N namespace+sshd nodes and an inventory directory that describes them."""

    def __init__(self, count: int):
        self.count = count
        self.dir = Path(tempfile.mkdtemp(prefix="sparkrack-light-"))
        self.procs: list[subprocess.Popen] = []

    def names(self) -> list[tuple[str, str, str]]:
        """(name, netns, address) per node."""
        return [(f"light-{i:02d}", f"sr-light-{i:02d}", f"{SUBNET_PREFIX}{i + 1}")
                for i in range(self.count)]

    def __enter__(self) -> Path:
        host_key = self.dir / "host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
        shutil.copy(CLIENT_KEY.with_suffix(".pub"), self.dir / "authorized_keys")
        Path("/run/sshd").mkdir(exist_ok=True)
        hostnet.ip("addr", "replace", BRIDGE_ADDR, "dev", BRIDGE)
        pub = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
        hosts, known = [], []
        for rank, (name, netns, address) in enumerate(self.names()):
            veth = f"srl{rank}"
            hostnet.ip("netns", "add", netns)
            hostnet.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
            hostnet.ip("link", "set", veth, "master", BRIDGE, "up")
            hostnet.ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
            hostnet.ip("-n", netns, "link", "set", "eth0", "up")
            hostnet.ip("-n", netns, "link", "set", "lo", "up")
            config = self.dir / f"sshd-{name}.conf"
            config.write_text(
                f"ListenAddress {address}\nHostKey {host_key}\nPidFile none\nUsePAM no\n"
                f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nStrictModes no\n"
                f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nMaxStartups 100\n")
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", netns, "/usr/sbin/sshd", "-D", "-f", str(config)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            hosts.append(f"        {name}: {{ansible_host: {address}, rank: {rank}}}")
            known.append(f"{address} {pub}")
        (self.dir / "known_hosts").write_text("\n".join(known) + "\n")
        inv = self.dir / "inventory"
        (inv / "group_vars").mkdir(parents=True)
        (inv / "hosts.yml").write_text(
            "all:\n  children:\n    sparks:\n      hosts:\n" + "\n".join(hosts) +
            f"\n      vars: {{ansible_user: root, ansible_ssh_private_key_file: {CLIENT_KEY}}}\n")
        (inv / "group_vars" / "all.yml").write_text(
            f"tp_size: {self.count}\nrehearsal: true\nknown_hosts_file: {self.dir / 'known_hosts'}\n")
        time.sleep(0.5)  # sshd binds within milliseconds; give the slowest a moment
        return inv

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        for rank, (_name, netns, _address) in enumerate(self.names()):
            hostnet.ip("link", "del", f"srl{rank}", check=False)
            hostnet.ip("netns", "del", netns, check=False)
        hostnet.ip("addr", "del", BRIDGE_ADDR, "dev", BRIDGE, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
