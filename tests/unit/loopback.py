"""A real, throwaway sshd on loopback addresses 127.0.0.x for tests that need SSH.

"Nodes" spark-01..03 are 127.0.0.1..3 on one sshd port, their keys in a private
known_hosts file. spark-04 (127.0.0.4) is not in it; spark-05's recorded key is wrong.
tests/unit/conftest.py makes the `sshd` fixture (module scope) available to every test
module; modules import the helpers (`from loopback import inventory, ...`) and mark
themselves `pytestmark = needs_sshd`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from freeport import free_port

from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping, RackVars

SSHD = Path("/usr/sbin/sshd")
KNOWN = ("spark-01", "spark-02", "spark-03")
ADDRESSES = {"spark-01": "127.0.0.1", "spark-02": "127.0.0.2", "spark-03": "127.0.0.3",
             "spark-04": "127.0.0.4", "spark-05": "127.0.0.5"}

needs_sshd = pytest.mark.skipif(os.geteuid() != 0 or not SSHD.exists() or not shutil.which(
    "ssh-keygen"), reason="needs root, /usr/sbin/sshd and ssh-keygen")
"""Mark a test module with `pytestmark = needs_sshd`."""


@dataclass(frozen=True)
class Sshd:
    """A running throwaway sshd and the files around it."""

    port: int
    pid: int
    client_key: Path
    known_hosts: Path
    directory: Path




def keygen(path: Path) -> str:
    """Create an ed25519 key pair at path; return the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd -D on 127.0.0.1-5 with a temp host key, authorized key and known_hosts."""
    directory = tmp_path_factory.mktemp("sshd")
    port = free_port()
    host_key = keygen(directory / "host_ed25519")
    other_key = keygen(directory / "other_ed25519")
    client_pub = keygen(directory / "client_ed25519")
    (directory / "authorized_keys").write_text(client_pub + "\n")
    known = [f"[{ADDRESSES[name]}]:{port} {host_key}" for name in KNOWN]
    known.append(f"[{ADDRESSES['spark-05']}]:{port} {other_key}")
    (directory / "known_hosts").write_text("\n".join(known) + "\n")
    listen = "\n".join(f"ListenAddress {address}:{port}" for address in ADDRESSES.values())
    (directory / "sshd_config").write_text(f"""{listen}
HostKey {directory}/host_ed25519
PidFile {directory}/sshd.pid
AuthorizedKeysFile {directory}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel ERROR
""")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(directory / "sshd_config")])
    try:
        _wait_listening(port)
        yield Sshd(port, process.pid, directory / "client_ed25519", directory / "known_hosts",
                   directory)
    finally:
        process.terminate()
        process.wait(timeout=5)


def _wait_listening(port: int) -> None:
    """Return once sshd accepts connections on 127.0.0.1:port (5 s at most)."""
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("sshd did not start")


def inventory(sshd: Sshd, names: tuple[str, ...] = KNOWN, *, port: int | None = None,
              connect_timeout: float = 2.0, path: Path | None = None,
              **rack_vars: object) -> Inventory:
    """An inventory of the named loopback nodes, built in memory (at path: default the
    sshd's directory); rack_vars override RackVars fields."""
    rack = RackVars(tp_size=len(names), ssh_connect_timeout=connect_timeout,
                    ssh_command_timeout=10.0, known_hosts_file=str(sshd.known_hosts),
                    **rack_vars)
    nodes = tuple(Node(name, ADDRESSES[name], port or sshd.port, "root", sshd.client_key, rank,
                       ADDRESSES[name], rack) for rank, name in enumerate(names))
    return Inventory(path or sshd.directory, nodes, rack, FrozenMapping({"sparks": names}))


def session_pids(sshd: Sshd) -> list[int]:
    """The per-connection sshd processes (children of the listener)."""
    children = Path(f"/proc/{sshd.pid}/task/{sshd.pid}/children").read_text().split()
    return [int(pid) for pid in children]




def new_session_pid(sshd: Sshd, connect) -> int:
    """The sshd process serving the connection that connect() opens."""
    before = set(session_pids(sshd))
    connect()
    for _ in range(50):
        fresh = set(session_pids(sshd)) - before
        if fresh:
            return fresh.pop()
        time.sleep(0.02)
    raise RuntimeError("no new sshd session process")


def write_inventory(sshd: Sshd, directory: Path, names: tuple[str, ...] = KNOWN, *,
                    ports: dict[str, int] | None = None) -> Path:
    """The same loopback nodes as an inventory directory on disk (for the CLI), ranks in
    the order given; ports overrides a node's SSH port (a dead one, say)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").mkdir(exist_ok=True)
    hosts = "".join(
        f"        {name}: {{ansible_host: {ADDRESSES[name]}, "
        f"ansible_port: {(ports or {}).get(name, sshd.port)}, rank: {rank}}}\n"
        for rank, name in enumerate(names))
    (directory / "hosts.yml").write_text(
        "all:\n  children:\n    sparks:\n      hosts:\n" + hosts + "      vars:\n"
        f"        ansible_user: root\n        ansible_ssh_private_key_file: {sshd.client_key}\n")
    (directory / "group_vars" / "all.yml").write_text(
        f"tp_size: {len(names)}\nssh_connect_timeout: 2\nssh_command_timeout: 10\n"
        f"known_hosts_file: {sshd.known_hosts}\n")
    return directory
