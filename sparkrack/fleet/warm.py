"""SSH connections opened ahead of their first use (each handed over once), and the rack
lock's connection lent to the task it guards (docs/internals.md#how-it-talks-to-nodes).

    prewarm(inventory, inventory.nodes)   # returns at once; connects in the background
    Fleet(inventory)                      # claims them (Fleet._connection)
    discard()                             # the task ended: close what nobody claimed
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from fabric import Connection

from sparkrack.fleet.ssh import open_connection
from sparkrack.inventory import Inventory, Node

_Key = tuple[str, str, int, str, str, str]

_pending: dict[_Key, Future[Connection]] = {}
_lent: dict[_Key, Connection] = {}
_guard = threading.Lock()


def _key(node: Node, known_hosts: Path) -> _Key:
    return (node.name, node.address, node.port, node.user, str(node.key_file), str(known_hosts))


def prewarm(inventory: Inventory, nodes: Iterable[Node]) -> None:
    """Start opening a connection to each node in the background (skipping nodes already
    pending); the first fleet that needs one claims it."""
    known_hosts = inventory.known_hosts_path
    wanted = [node for node in nodes if _key(node, known_hosts) not in _pending]
    if not wanted:
        return
    pool = ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="prewarm")
    with _guard:
        for node in wanted:
            _pending.setdefault(_key(node, known_hosts),
                                pool.submit(open_connection, node, known_hosts))
    pool.shutdown(wait=False)


def claim(node: Node, known_hosts: Path) -> Connection | None:
    """The warm connection to node, now the caller's; None if there is none or it could not
    be opened. Waits for one still opening (open_connection bounds that wait)."""
    with _guard:
        future = _pending.pop(_key(node, known_hosts), None)
    if future is None:
        return None
    try:
        connection = future.result()
    except Exception:  # noqa: BLE001 - the caller's own attempt reports the error
        return None
    if connection.is_connected:
        return connection
    connection.close()
    return None


def lend(node: Node, known_hosts: Path, connection: Connection) -> None:
    """Let fleets borrow connection to node until unlend."""
    with _guard:
        _lent[_key(node, known_hosts)] = connection


def unlend(node: Node, known_hosts: Path) -> None:
    """Stop lending the connection to node."""
    with _guard:
        _lent.pop(_key(node, known_hosts), None)


def borrow(node: Node, known_hosts: Path) -> Connection | None:
    """The open connection to node lent by its owner (not the caller's to close), or None."""
    with _guard:
        connection = _lent.get(_key(node, known_hosts))
    return connection if connection is not None and connection.is_connected else None


def discard() -> None:
    """Close every connection nobody claimed (waiting for those still opening)."""
    with _guard:
        futures = list(_pending.values())
        _pending.clear()
    for future in futures:
        future.add_done_callback(_close_result)


def _close_result(future: Future[Connection]) -> None:
    if future.exception() is None:
        future.result().close()


atexit.register(discard)
