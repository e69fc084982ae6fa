"""The files that make a plain overlay of this machine into one rehearsal node.

Everything is written into the node's overlay upper directory while the node is down, and
rewritten only when it differs, so `rehearsal.up` twice changes nothing.
"""

import json
import os
import re
import secrets
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from sparkrack.rehearsal.layout import HCAS, NodeLayout


def read_json_object(path: Path) -> dict:
    """The JSON object in path; {} if it is missing, unreadable or not an object (a node's
    state files are rewritten while nodes run and power off)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


SIM_LIB = "usr/local/lib/sparkrack-sim"
LINGER = "var/lib/systemd/linger/root"
HOST_KEY = "etc/ssh/ssh_host_ed25519_key"
KEPT_KEY = f"{HOST_KEY}.recorded"  # the recorded key while rehearsal.rekey gave another
SIM_COMMANDS = {"nvidia-smi": "nvsmi/nvidia-smi", "gpu-sim": "gpusim/gpu-sim",  # on PATH
                "ibdev2netdev": "roce/ibdev2netdev",
                "nvidia-container-runtime-hook": "container/nvidia-container-runtime-hook"}
# Host units that must not start inside a node: timers, databases, consoles, and
# anything that would try to reach the network (timesyncd).
MASKED_UNITS = (
    "postgresql.service", "apt-daily.timer", "apt-daily-upgrade.timer", "man-db.timer",
    "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "dpkg-db-backup.timer",
    "systemd-timesyncd.service", "apparmor.service", "getty@tty1.service",
    "console-getty.service", "systemd-networkd-wait-online.service", "networking.service",
    "ModemManager.service", "unattended-upgrades.service", "cron.service",
    "prometheus.service",  # CI installs Debian's prometheus on this machine (for its tests)
    # udev is this machine's (netplan apply calls udevadm); no node runs a udevd of its own
    "systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service", "systemd-udev-settle.service",
)
SHIPPED_UNITS = ("nvidia-persistenced.service", "rehearsal-roce.service",
                 "rehearsal-roce-follow.service")  # ours, in /etc
ENABLED_UNITS = (*SHIPPED_UNITS, "ssh.service", "docker.service", "containerd.service")
# The daemon netplan renders the fabric with (rehearsal.renderer, kept on the node's disk):
# systemd-networkd by default, NetworkManager as NVIDIA's performance guide sets it; the
# other one's units are masked (disabled: netplan apply starts networkd to read its .link
# files). The management port is this machine's to set (no netplan file names it).
NETWORKD, NETWORK_MANAGER = "networkd", "NetworkManager"
DAEMON_UNITS = {
    NETWORKD: ("systemd-networkd.service",),
    NETWORK_MANAGER: ("NetworkManager.service", "NetworkManager-wait-online.service",
                      "NetworkManager-dispatcher.service"),
}
NM_CONFIG = "etc/NetworkManager/conf.d/rehearsal.conf"
# The node's own network config: this machine's (if it has any) must not show through.
OWN_CONFIG_DIRS = ("etc/netplan", "etc/systemd/network")


def _package_file(*parts: str) -> Path:
    return Path(str(resources.files("sparkrack.rehearsal").joinpath(*parts)))


def write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Write data to path unless it already holds exactly that; True when written."""
    if path.is_file() and path.read_bytes() == data and (path.stat().st_mode & 0o7777) == mode:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def symlink(path: Path, target: str) -> None:
    """Make path a symlink to target (replacing anything else there)."""
    if path.is_symlink() and os.readlink(path) == target:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def host_key(node: NodeLayout) -> str:
    """The node's own ed25519 host key (generated once), the one known_hosts records: while
    `rehearsal.rekey` has given the node another, the one kept aside. The public key line."""
    key = node.upper / HOST_KEY
    if (node.upper / KEPT_KEY).exists():
        key = node.upper / KEPT_KEY
    elif not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name,
                        "-f", str(key)], check=True)
    return key.with_suffix(".pub").read_text().strip()


def write_node_files(node: NodeLayout, peers: list[NodeLayout], client_pubkey: str,
                     gid_index: int = 3, gpu: dict | None = None) -> None:
    """Lay down identity, sshd, docker, the simulated GPU/RoCE and the unit masks.

    gpu: extra keys of the simulated GPU's node.json (e.g. driver_version) for an extra
    node; None for the inventory's nodes (node.json then names the node only)."""
    up = node.upper
    write_if_changed(up / "etc/hostname", f"{node.name}\n".encode())
    machine_id = up / "etc/machine-id"
    if not machine_id.exists():
        write_if_changed(machine_id, (secrets.token_hex(16) + "\n").encode(), 0o444)
    hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
        f"{p.address} {p.name}\n" for p in peers)
    write_if_changed(up / "etc/hosts", hosts.encode())
    # no systemd user manager for root: SSH logins open no logind session (files/pam-sshd),
    # so nothing starts one; a disk from an older rack kept it lingering from every boot
    (up / LINGER).unlink(missing_ok=True)
    files = {
        "etc/ssh/sshd_config.d/sparkrack-rehearsal.conf": "sshd-rehearsal.conf",
        "etc/pam.d/sshd": "pam-sshd",
        "etc/docker/daemon.json": "daemon.json",
        "etc/systemd/system/docker.service.d/cgroup-rw.conf": "docker-cgroup-rw.conf",
        "etc/systemd/system/nvidia-persistenced.service": "nvidia-persistenced.service",
        "etc/systemd/system/rehearsal-roce.service": "rehearsal-roce.service",
        "etc/systemd/system/rehearsal-roce-follow.service": "rehearsal-roce-follow.service",
        "etc/systemd/system/systemd-networkd.service.d/rehearsal.conf": "networkd-no-udevd.conf",
        "etc/systemd/system/NetworkManager.service.d/rehearsal.conf": "nm-no-udevd.conf",
        "root/.bashrc": "root-bashrc",
        "root/.profile": "root-profile",
    }
    for dest, name in files.items():
        write_if_changed(up / dest, _package_file("files", name).read_bytes())
    authorize(up / "etc/ssh/sparkrack_authorized_keys", client_pubkey)
    install_fabric_config(node)
    install_sim(node)
    if not (up / KERNEL_PATH).exists():  # kept once set (rehearsal.kernel), like a boot entry
        write_kernel(node, None)
    hw_path = up / "etc/gpu-sim/hardware.json"
    if hw_path.exists():  # kept across `up` (tests and onboarding change the hardware), but
        kept = json.loads(hw_path.read_text())  # always the four functions of today's layout
        write_hardware(node, kept.get("missing", ()), kept.get("gid_index", gid_index))
    else:
        write_hardware(node, gid_index=gid_index)
    write_if_changed(up / "etc/gpu-sim/node.json",
                     json.dumps({"node": node.name, **(gpu or {})}).encode())
    for folder in OWN_CONFIG_DIRS:
        own = up / folder
        own.mkdir(parents=True, exist_ok=True)
        os.setxattr(own, "trusted.overlay.opaque", b"y")  # the lower (this machine's) hidden
    write_if_changed(up / NM_CONFIG, _package_file("files", "nm-rehearsal.conf").read_bytes())
    for unit in MASKED_UNITS:
        symlink(up / "etc/systemd/system" / unit, "/dev/null")
    for unit in ENABLED_UNITS:  # a disk from an older rack may hold a mask of it
        mask = up / "etc/systemd/system" / unit
        if mask.is_symlink() and os.readlink(mask) == "/dev/null":
            mask.unlink()
    for unit in ENABLED_UNITS:
        unit_dir = "/etc/systemd/system" if unit in SHIPPED_UNITS else "/lib/systemd/system"
        symlink(up / "etc/systemd/system/multi-user.target.wants" / unit, f"{unit_dir}/{unit}")
    write_network_daemon(node, network_daemon(node))


def has_network_manager() -> bool:
    """Whether this machine has NetworkManager, which a node's overlay would run."""
    return Path("/lib/systemd/system/NetworkManager.service").exists()


def network_daemon(node: NodeLayout) -> str:
    """The daemon the node's netplan renders with, as its disk says (networkd unless it
    was set to NetworkManager)."""
    wants = node.upper / "etc/systemd/system/multi-user.target.wants/NetworkManager.service"
    return NETWORK_MANAGER if wants.is_symlink() else NETWORKD


def daemon_links(daemon: str) -> list[tuple[str, str | None]]:
    """The links that make daemon the node's network daemon: (path under /etc, its target,
    or None: no link there), relative to /. Its first unit enabled; NetworkManager's units masked when
    networkd renders (networkd's only disabled: netplan apply starts it for its .link
    files)."""
    links: list[tuple[str, str | None]] = []
    for name, units in DAEMON_UNITS.items():
        for unit in units:
            wants = f"etc/systemd/system/multi-user.target.wants/{unit}"
            mask = f"etc/systemd/system/{unit}"
            enabled = name == daemon and unit == units[0]
            links.append((wants, f"/lib/systemd/system/{unit}" if enabled else None))
            links.append((mask, "/dev/null" if name != daemon and name == NETWORK_MANAGER
                          else None))
    return links


def write_network_daemon(node: NodeLayout, daemon: str) -> None:
    """Make daemon the node's network daemon on its disk (while it is down)."""
    for path, target in daemon_links(daemon):
        if target:
            symlink(node.upper / path, target)
        elif (node.upper / path).is_symlink():
            (node.upper / path).unlink()


INSTALLER_NETPLAN = "etc/netplan/40-cx7.yaml"  # where NVIDIA's two-Spark playbook puts it


def install_fabric_config(node: NodeLayout) -> None:
    """A new node's fabric config as the site's install left it (once: then it is the
    node's own file): port 0's two netdevs with their addresses, at the default MTU. Role
    fabric's drop-in adds the jumbo MTU and follows the inventory (another port, prefix)."""
    config = node.upper / INSTALLER_NETPLAN
    if config.exists():
        return
    write_if_changed(config, (
        "# The ConnectX-7 fabric as this Spark was installed (the site's addresses; no MTU:\n"
        "# 1500 until `invoke provision` role fabric sets the rack's).\n"
        "network:\n  version: 2\n  ethernets:\n"
        f"    enp1s0f0np0:\n      addresses: [{node.roce_addr}/24]\n"
        f"    enP2p1s0f0np0:\n      addresses: [{node.twin_addr}/24]\n").encode(), 0o600)


def authorize(path: Path, pubkey: str) -> None:
    """This machine's key in the node's authorized-keys file, keeping every other line
    there (the watchdog's key survives a power cycle, as it would on a real disk)."""
    lines = path.read_text().splitlines() if path.is_file() else []
    if pubkey not in lines:
        lines.insert(0, pubkey)
    write_if_changed(path, ("\n".join(lines) + "\n").encode(), 0o600)


def install_stub_model(node: NodeLayout, model_path: str) -> None:
    """The stub engines' model directory (config, fake shards, manifest) on a fresh node.

    Written once: tests and `rehearsal.stub-model` change it later through the node."""
    from sparkrack.rehearsal.stub.modeldir import model_files

    target = node.upper / model_path.strip("/")
    if (target / "config.json").exists():
        return
    for name, data in model_files().items():
        write_if_changed(target / name, data)


def install_sim(node: NodeLayout) -> None:
    """Copy the simulators into the node, folder by folder (the files of an earlier layout
    removed), and put their commands on PATH."""
    sim = _package_file("sim")
    dest = node.upper / SIM_LIB
    shipped = {item.relative_to(sim) for item in sim.rglob("*")
               if item.is_file() and "__pycache__" not in item.parts}
    for path in sorted(shipped):
        mode = 0o755 if os.access(sim / path, os.X_OK) else 0o644
        write_if_changed(dest / path, (sim / path).read_bytes(), mode)
    for item in list(dest.rglob("*")):
        if not item.is_dir() and "__pycache__" not in item.parts and \
                item.relative_to(dest) not in shipped:
            item.unlink()
    for command, path in SIM_COMMANDS.items():
        symlink(node.upper / "usr/local/bin" / command, f"/{SIM_LIB}/{path}")


def write_hardware(node: NodeLayout, missing: list[str] | tuple[str, ...] = (),
                   gid_index: int = 3) -> None:
    """The node's simulated HCAs (/etc/gpu-sim/hardware.json), some of them missing; their
    links and addresses are the netdevs' (roce-mount reads them at boot)."""
    unknown = sorted(set(missing) - set(HCAS))
    if unknown:
        raise ValueError(f"unknown HCA {', '.join(unknown)} (the node has {', '.join(HCAS)})")
    hardware = {"hcas": HCAS, "gid_index": gid_index, "missing": sorted(missing), "down": []}
    write_if_changed(node.upper / "etc/gpu-sim/hardware.json",
                     json.dumps(hardware, indent=1).encode())


DGX_OS_KERNEL = "6.17.0-1008-nvidia"  # what `uname -r` reads on a DGX OS Spark
KHO_KERNELS = ("7.0.0-1019-nvidia",)  # KHO leaves CmaTotal 0 and breaks ibv_reg_mr (public)
KERNEL_PATH = "etc/gpu-sim/kernel.json"  # the kernel the node boots, for gpusimd
UNAME_WRAPPER = """#!/bin/sh
# Rehearsal node: the simulated host kernel release `uname -r` reports (rehearsal.kernel).
case "$1" in
  -r) echo "$SPARKRACK_SIM_KERNEL" ;;
  *) exec /usr/bin/uname "$@" ;;
esac
"""
UNAME_PATH = "usr/local/bin/uname"


def uname_script(kernel: str | None) -> bytes:
    """A `uname` for PATH that answers -r with kernel (None: DGX OS's) and passes the rest
    to the real one. ValueError for a release that is not one."""
    release = kernel or DGX_OS_KERNEL
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+~-]*", release):
        raise ValueError(f"kernel release {release!r}: letters, digits and . _ + ~ - only")
    return UNAME_WRAPPER.replace('"$SPARKRACK_SIM_KERNEL"', release).encode()


def kernel_json(kernel: str | None, kho_bug: bool | None = None, cmdline: str = "") -> bytes:
    """What the node's kernel.json says: the release (None: DGX OS's), whether KHO breaks
    its CMA (None: as public reports say of that release, KHO_KERNELS) and the parameters
    added to its command line (e.g. kho=off). ValueError for a parameter that is not one."""
    release = kernel or DGX_OS_KERNEL
    words = cmdline.split()
    bad = [word for word in words if not re.fullmatch(r"[A-Za-z0-9_.,:/+=-]+", word)]
    if bad:
        raise ValueError(f"kernel parameter {bad[0]!r}: letters, digits and _ . , : / + = - only")
    bug = release in KHO_KERNELS if kho_bug is None else kho_bug
    return (json.dumps({"release": release, "kho_cma_bug": bug,
                        "cmdline_extra": " ".join(words)}) + "\n").encode()


def write_kernel(node: NodeLayout, kernel: str | None, kho_bug: bool | None = None,
                 cmdline: str = "") -> None:
    """The node's simulated host kernel (None: DGX OS's), on its disk while it is down:
    `uname -r` through PATH reports the release, gpusimd shows its command line and CMA
    counters (kernel_json); the real kernel is this machine's."""
    data = kernel_json(kernel, kho_bug, cmdline)
    write_if_changed(node.upper / UNAME_PATH, uname_script(kernel), 0o755)
    write_if_changed(node.upper / KERNEL_PATH, data)


def wipe(node: NodeLayout) -> None:
    """Remove a node's disk state (upper dir, docker data): the node is gone for good."""
    shutil.rmtree(node.state, ignore_errors=True)
