"""A private copy of the rehearsal inventory, with its own known_hosts: what a chaos run or
a test changes (a node onboarded, the head replaced) instead of the shipped files."""

from __future__ import annotations

import shutil
from pathlib import Path

from sparkrack.rehearsal.layout import KNOWN_HOSTS
from sparkrack.rehearsal.nodeproc import in_node


def copy_inventory(source: Path, target: Path) -> Path:
    """source (inventory/rehearsal) copied to target, known_hosts_file pointing at a copy of
    the rack's known_hosts inside it; target."""
    shutil.copytree(source, target)
    shutil.copy(KNOWN_HOSTS, target / "known_hosts")
    rack_vars = target / "group_vars" / "all.yml"
    text = rack_vars.read_text()
    line = next(l for l in text.splitlines() if l.startswith("known_hosts_file:"))
    rack_vars.write_text(text.replace(line, "known_hosts_file: known_hosts"))
    return target


def host_key_fingerprint(rack, name: str) -> str:
    """The node's host key fingerprint as an operator reads it on its console."""
    out = in_node(rack.node(name), ["ssh-keygen", "-lf", "/etc/ssh/ssh_host_ed25519_key.pub"])
    return out.stdout.split()[1]
