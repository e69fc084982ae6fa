"""Opening SSH connections to nodes, the one way both the fleet and its docker clients do it.

Every connection: goes to the address netguard vetted (through a socket we open, so no
second name lookup can lead elsewhere); trusts only the inventory's known_hosts file
(never ~/.ssh/known_hosts, system keys or ssh_config) and refuses unknown keys; offers only
the inventory's key (no agent, no key search); bounds the TCP connect, banner, auth and
channel-open waits by the node's ssh_connect_timeout; once open, is watched: a liveness
probe every LIVENESS_INTERVAL seconds, and a node that leaves one unanswered for
LIVENESS_TIMEOUT seconds has its connection closed, which ends every command, transfer and
docker call waiting on it (a dead node is found within 7 s, whatever the command's own
timeout). The probes are the keepalives.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from concurrent.futures import Future
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.core.events import node_lost
from sparkrack.fleet.netguard import check_node
from sparkrack.inventory import Node

LIVENESS_INTERVAL = 2.0  # seconds between two liveness probes of an open connection
TCP_CONNECT_TIMEOUT = 1.5  # a live node's kernel answers a SYN within a millisecond, however
# busy its sshd: a node silent this long at the TCP step is down or cut (the SSH steps after
# it keep ssh_connect_timeout, so a slow-but-alive node is not called dead)
LIVENESS_TIMEOUT = 5.0  # a probe unanswered this long (or ssh_connect_timeout if shorter): lost
ONBOARD_HINT = "run invoke onboard or rehearsal.up to record it"


class UnreachableError(SparkrackError):
    """No session could be had with a node; the message names it and says why."""


class HostKeyUnknown(paramiko.SSHException):
    """The node offered a host key that the known_hosts file does not list."""


class RefuseUnknownHostKey(paramiko.RejectPolicy):
    """paramiko's RejectPolicy, raising HostKeyUnknown so the refusal can be explained."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        """Refuse the connection: the key is in no known_hosts we trust."""
        raise HostKeyUnknown(f"{hostname}: {key.get_name()} {key.fingerprint}")


def who(node: Node) -> str:
    """How messages name a node: 'spark-03 (10.77.1.13)', with ':port' unless port 22."""
    port = "" if node.port == 22 else f":{node.port}"
    return f"{node.name} ({node.address}{port})"


def open_connection(node: Node, known_hosts: Path) -> Connection:
    """A fabric Connection to node, open, host key verified against known_hosts only."""
    with ExitStack() as on_error:
        sock = vetted_socket(node)
        on_error.callback(sock.close)
        config = Config(lazy=True, ssh_config=paramiko.SSHConfig())  # no ssh_config, no files
        connection = Connection(node.address, user=node.user, port=node.port, config=config,
                                forward_agent=False, connect_kwargs=connect_kwargs(node, sock))
        on_error.callback(connection.client.close)
        trust_only(connection.client, known_hosts)
        connection.open()
        on_error.pop_all()
    watch_liveness(connection.transport, node)
    return connection


def open_client(node: Node, known_hosts: Path) -> paramiko.SSHClient:
    """A plain paramiko client to node, connected exactly as open_connection does."""
    with ExitStack() as on_error:
        sock = vetted_socket(node)
        on_error.callback(sock.close)
        client = paramiko.SSHClient()
        on_error.callback(client.close)
        trust_only(client, known_hosts)
        client.connect(node.address, port=node.port, username=node.user,
                       **connect_kwargs(node, sock))
        on_error.pop_all()
    watch_liveness(client.get_transport(), node)
    return client


def vetted_socket(node: Node) -> socket.socket | QuickAckSocket:
    """A TCP socket connected to node's netguard-vetted address within tcp_timeout(node)."""
    address = check_node(node)
    if node.key_file is None:
        raise UnreachableError(f"{who(node)}: no SSH key in the inventory",
                               fix="set ansible_ssh_private_key_file for it")
    if not node.key_file.is_file():
        raise UnreachableError(f"{who(node)}: SSH key {node.key_file} not found",
                               fix="run invoke onboard (real rack) or invoke rehearsal.up")
    sock = socket.create_connection((address, node.port), timeout=tcp_timeout(node))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return QuickAckSocket(sock) if hasattr(socket, "TCP_QUICKACK") else sock


def tcp_timeout(node: Node) -> float:
    """Seconds the TCP connect to node may take (the fast probe before the SSH handshake)."""
    return min(node.vars.ssh_connect_timeout, TCP_CONNECT_TIMEOUT)


class QuickAckSocket:
    """A TCP socket that acknowledges at once what it receives (TCP_QUICKACK before each
    read; Linux clears it on its own). SSH packets are small and answer each other: with
    Nagle's algorithm on one side and a delayed ACK on the other, a channel open or an
    exit status waits ~40 ms for nothing (measured: every session open took 41 ms)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def recv(self, size: int, *flags: int) -> bytes:
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass  # closed: the read below says so
        return self._sock.recv(size, *flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def connect_kwargs(node: Node, sock: socket.socket) -> dict[str, Any]:
    """paramiko connect() arguments: our socket, our key only, every wait bounded.

    The float timeout is passed here rather than as fabric's connect_timeout, which
    fabric truncates to an int (0.5 would become 0: no timeout at all).
    """
    seconds = node.vars.ssh_connect_timeout
    return {"sock": sock, "key_filename": str(node.key_file), "look_for_keys": False,
            "allow_agent": False, "timeout": seconds, "banner_timeout": seconds,
            "auth_timeout": seconds, "channel_timeout": seconds}


def trust_only(client: paramiko.SSHClient, known_hosts: Path) -> None:
    """Make client trust exactly the keys in known_hosts and refuse any other key."""
    client.get_host_keys().clear()
    if known_hosts.is_file():
        try:
            client.load_host_keys(str(known_hosts))
        except (OSError, paramiko.hostkeys.InvalidHostKey) as error:
            raise UsageError(f"{known_hosts}: cannot read: {error}",
                             fix="fix or delete the bad line, then " + ONBOARD_HINT) from None
    client.set_missing_host_key_policy(RefuseUnknownHostKey())


_LOST: weakref.WeakKeyDictionary[paramiko.Transport, str] = weakref.WeakKeyDictionary()


def watch_liveness(transport: paramiko.Transport, node: Node) -> None:
    """Probe transport's peer every LIVENESS_INTERVAL s while it is open; close it when a
    probe goes unanswered (lost_reason then says why). A daemon thread per connection."""
    timeout = min(node.vars.ssh_connect_timeout, LIVENESS_TIMEOUT)

    def watch() -> None:
        while transport.is_active():
            time.sleep(LIVENESS_INTERVAL)
            if transport.is_active() and not answers(transport, timeout):
                if transport.is_active():
                    reason = f"no answer to a liveness probe within {timeout:g} s"
                    _LOST[transport] = reason
                    transport.close()  # wakes every channel waiting on it
                    node_lost(node.name, f"{who(node)}: stopped answering ({reason}); what "
                              "ran there is ended and reported as unreachable")
                return

    threading.Thread(target=watch, name=f"liveness-{node.name}", daemon=True).start()


def lost_reason(transport: paramiko.Transport | None) -> str | None:
    """Why the liveness watch closed transport, or None if it did not."""
    return None if transport is None else _LOST.get(transport)


def answers(transport: paramiko.Transport, timeout: float) -> bool:
    """Whether the peer of an open transport still answers: a channel opens within timeout
    (or the peer refuses it: a refusal is an answer, e.g. at sshd's MaxSessions).

    The probe runs in a thread of its own: on a wedged transport even sending can block
    (until the transport is closed), and the caller must get its answer regardless.
    """
    answer: Future[bool] = Future()

    def probe() -> None:
        try:
            transport.open_session(timeout=timeout).close()
        except paramiko.ChannelException:
            answer.set_result(True)
        except (paramiko.SSHException, OSError, EOFError):
            answer.set_result(False)
        else:
            answer.set_result(True)

    threading.Thread(target=probe, name="fleet-probe", daemon=True).start()
    try:
        return answer.result(timeout=timeout + 1)
    except TimeoutError:
        return False


def cause(error: BaseException) -> str:
    """What kind of failure to get a session error is, naming nothing of the node (no
    address, port, user, key path or fingerprint): for records that leave the machine."""
    if isinstance(error, HostKeyUnknown):
        return "host key unknown"
    if isinstance(error, paramiko.BadHostKeyException):
        return "host key changed"
    if isinstance(error, paramiko.AuthenticationException):
        return "authentication refused"
    return "unreachable"


def explain(node: Node, known_hosts: Path, error: BaseException) -> str:
    """The one-line message for a failure to get a session with node."""
    prefix = f"{who(node)}: "
    if isinstance(error, SparkrackError):
        return error.line()
    if isinstance(error, HostKeyUnknown):
        missing = "" if known_hosts.is_file() else " (the file does not exist)"
        return f"{prefix}host key not in {known_hosts}{missing}; {ONBOARD_HINT}"
    if isinstance(error, paramiko.BadHostKeyException):
        return (f"{prefix}host key CHANGED since it was recorded in {known_hosts} (now "
                f"{error.key.get_name()} {error.key.fingerprint}); refusing to connect: if the "
                "node was reinstalled, delete its line there, then " + ONBOARD_HINT)
    if isinstance(error, paramiko.AuthenticationException):
        return (f"{prefix}user {node.user} refused key {node.key_file}: put its public key "
                "in the node's authorized_keys (invoke onboard)")
    if isinstance(error, socket.gaierror):
        return f"{prefix}cannot resolve {node.address}: {error.strerror}"
    if isinstance(error, ConnectionRefusedError):
        return f"{prefix}connection refused on port {node.port} (is sshd running?)"
    if isinstance(error, TimeoutError):
        return (f"{prefix}no answer within {tcp_timeout(node):g} s (TCP connect: the node is "
                "down or its link is cut)")
    if isinstance(error, OSError):
        return f"{prefix}{error.strerror or error}"
    if isinstance(error, EOFError):
        return f"{prefix}connection closed by the node"
    return f"{prefix}ssh: {error}"
