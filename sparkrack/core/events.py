"""Process-wide news for the operator that no return value can carry in time.

The fleet's liveness watch (fleet_ssh) gives up on a node in the middle of a long command;
the command goes on with the other nodes and reports the lost one when it ends. The CLI
listens here, so the operator reads the node's name the moment it is lost. Light on
purpose (no imports): the CLI registers its listener before knowing which task runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

SAY_AGAIN_AFTER = 30.0  # seconds: a node has a fleet and a docker connection; both notice

_listeners: list[Callable[[str], None]] = []
_said: dict[str, float] = {}
_guard = threading.Lock()


def on_node_lost(listener: Callable[[str], None]) -> None:
    """Call listener(message) whenever a node is found lost (once per node per 30 s)."""
    with _guard:
        if listener not in _listeners:
            _listeners.append(listener)


def node_lost(node: str, message: str) -> None:
    """Tell the listeners that node was lost; message names it and says why."""
    now = time.monotonic()
    with _guard:
        if now - _said.get(node, -SAY_AGAIN_AFTER) < SAY_AGAIN_AFTER:
            return
        _said[node] = now
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(message)
        except Exception:  # noqa: BLE001 - a listener must not break the fleet's watch
            pass
