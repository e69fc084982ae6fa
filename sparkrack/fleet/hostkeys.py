"""A node's SSH host key, read before it is trusted (onboarding's trust step), and the
known_hosts file as paramiko reads it.

The key is read by a bare Transport to the netguard-vetted address: key exchange only, no
authentication, nothing sent that the node could log as a login.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeys, InvalidHostKey

from sparkrack.core.errors import UsageError
from sparkrack.fleet.netguard import check_node
from sparkrack.inventory import Node

HostKey = paramiko.PKey
FETCH_ERRORS = (OSError, paramiko.SSHException, EOFError)  # what fetch_host_key may raise


def fingerprint(key: paramiko.PKey) -> str:
    """The key's OpenSSH SHA256 fingerprint: 'SHA256:' + unpadded base64 of the blob."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def fetch_host_key(node: Node, preferred_types: Sequence[str] = ()) -> paramiko.PKey:
    """The host key node offers, over a Transport to its vetted address (no auth).

    preferred_types: key types to ask for first (those already recorded for the host), so
    a recorded key is compared with the node's key of the same type, as the fleet's
    connections will negotiate it."""
    address = check_node(node)
    seconds = node.vars.ssh_connect_timeout
    sock = socket.create_connection((address, node.port), timeout=seconds)
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = seconds
        options = transport.get_security_options()
        wanted = [t for t in preferred_types if t in options.key_types]
        if wanted:
            options.key_types = wanted + [t for t in options.key_types if t not in wanted]
        transport.start_client(timeout=seconds)
        return transport.get_remote_server_key()
    finally:
        transport.close()
        sock.close()


def read_known_hosts(path: Path) -> HostKeys:
    """The known_hosts file as paramiko reads it (none yet: empty)."""
    keys = HostKeys()
    if path.is_file():
        try:
            keys.load(str(path))
        except (OSError, InvalidHostKey) as error:
            raise UsageError(f"{path}: cannot read: {error}",
                             fix="fix or delete the bad line") from None
    return keys


def recorded_keys(keys: HostKeys, names: Iterable[str]) -> dict[str, dict[str, paramiko.PKey]]:
    """{host id: {key type: key}} recorded for each of names (hashed entries included)."""
    found = {}
    for name in names:
        entry = keys.lookup(name)
        if entry:
            found[name] = {key_type: entry[key_type] for key_type in entry.keys()}
    return found


def line_matches(line: str, ident: str) -> bool:
    """Whether a known_hosts line names ident (plain or hashed)."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return False
    first = stripped.split()[0]
    for name in first.split(","):
        if name == ident:
            return True
        if name.startswith("|1|") and HostKeys.hash_host(ident, name) == name:
            return True
    return False
