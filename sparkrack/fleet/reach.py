"""Does a node answer at all? One SSH login, its outcome sorted for decisions that must
fail closed (break-glass stops engines only when the head is really gone):

- SESSION: the login worked: the node is there;
- REFUSED: something answered but did not let us in, or the question could not be asked:
  a changed or unknown host key, the login refused, the connection refused (the node's
  kernel answered: its sshd is down), the SSH handshake broken off after the TCP connect,
  a name that does not resolve, a missing key;
- SILENT: the TCP connect got no answer at all (timed out, no route to the host): what a
  powered-off node, a cut cable or a partition looks like from here.

Every attempt is a new connection (never a warm one), through the fleet's own checks:
netguard, the inventory's known_hosts only, the inventory's key only.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko

from sparkrack.core.errors import SparkrackError, UnsafeAddressError
from sparkrack.fleet.ssh import explain, open_client
from sparkrack.inventory import Node

SESSION, REFUSED, SILENT = "session", "refused", "silent"
# no host answered the connect: the packets went nowhere (a refusal is an answer)
NO_ANSWER = frozenset({errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
                       errno.EHOSTDOWN})


@dataclass(frozen=True)
class Reach:
    """How one login attempt to node went: state (SESSION, REFUSED, SILENT) and why (one
    line naming the node; '' for a session)."""

    node: str
    state: str
    why: str = ""


def reach(node: Node, known_hosts: Path) -> Reach:
    """Try one SSH login to node (a fresh connection, closed at once). UnsafeAddressError
    propagates: an address the fleet may not contact is the caller's error."""
    try:
        open_client(node, known_hosts).close()
    except UnsafeAddressError:
        raise
    except (SparkrackError, paramiko.SSHException, OSError, EOFError) as error:
        state = SILENT if is_silence(error) else REFUSED
        return Reach(node.name, state, explain(node, known_hosts, error))
    return Reach(node.name, SESSION)


def is_silence(error: BaseException) -> bool:
    """Whether error says that no host answered the TCP connect at all."""
    if isinstance(error, (TimeoutError, socket.timeout)):
        return True
    return isinstance(error, OSError) and not isinstance(error, socket.gaierror) and \
        error.errno in NO_ANSWER


__all__ = ["REFUSED", "SESSION", "SILENT", "Reach", "is_silence", "reach"]
