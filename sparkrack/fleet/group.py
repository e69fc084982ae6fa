"""Run commands and move files on many nodes at once over SSH, one result per node.

    with Fleet(inventory, inventory.select(limit)) as fleet:
        result = fleet.run(["uname", "-r"], timeout=10)
        for node in result.ok: ...
        result.raise_for_failures()

Each node gets its own thread and its own outcome: a dead, refused or misconfigured node
is reported as "unreachable" next to the others' results, never hidden behind an
exception. Connections (fabric) are opened on first use, kept warm and reused; a
connection whose peer stopped answering is dropped and reopened next time. Addresses
pass netguard before every connection. Command lines and stdin are never logged; an
argument wrapped in Secret shows as *** in every message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import paramiko
from fabric import Connection

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.fleet.argv import (
    Argv,
    quote_argv,
    redact_argv,
    redact_text,
    secret_values,
)
from sparkrack.fleet.channel import close_quietly, deadline, execute
from sparkrack.fleet.netguard import check_node
from sparkrack.fleet.results import FleetResult, NodeResult
from sparkrack.fleet.sftp import FileError, Upload, download, upload
from sparkrack.fleet.ssh import (
    UnreachableError,
    answers,
    cause,
    explain,
    lost_reason,
    open_connection,
    who,
)
from sparkrack.fleet.warm import borrow, claim, lend
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping

if TYPE_CHECKING:
    import docker

    from sparkrack.fleet.containers import NodeDocker

log = logging.getLogger(__name__)
# paramiko logs a dropped connection ("Socket exception: Connection reset by peer") through
# logging's last-resort stderr handler; the fleet reports every node's failure itself.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

Work = Callable[[paramiko.Channel, float], NodeResult]  # (session channel, timeout) -> result
_SESSION_ERRORS = (SparkrackError, paramiko.SSHException, OSError, EOFError)
_TAIL = 200  # characters of stderr quoted in a failure message


class Fleet:
    """The selected nodes of an inventory, with one warm SSH connection per node."""

    def __init__(self, inventory: Inventory, nodes: Iterable[Node] | None = None, *,
                 borrow: bool = True):
        """borrow: use a connection another fleet lends (the rack lock's, for the task it
        guards); a fleet whose connection must be its own alone (the lock's) says False."""
        self.inventory = inventory
        self._may_borrow = borrow
        self.nodes: tuple[Node, ...] = tuple(inventory.nodes if nodes is None else nodes)
        self._by_name = {node.name: node for node in self.nodes}
        # re-entrant: a docker client takes the node's connection under the node's lock
        self._locks = {node.name: threading.RLock() for node in self.nodes}
        self._connections: dict[str, Connection] = {}
        self._borrowed: set[str] = set()  # nodes whose connection another owner lent us
        self._docker: dict[str, docker.DockerClient] = {}

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every cached SSH connection and docker client."""
        for name in self._by_name:
            with self._locks[name]:
                client = self._docker.pop(name, None)
                if client is not None:
                    client.close()
                connection = self._connections.pop(name, None)
                if connection is not None and name not in self._borrowed:
                    connection.close()
                self._borrowed.discard(name)

    def lend(self, name: str) -> None:
        """Lend this fleet's open connection to node name to other fleets (fleet_warm.lend)
        until fleet_warm.unlend; it stays this fleet's to close."""
        node = self._node(name)
        with self._locks[name]:
            connection = self._connections.get(name)
        if connection is not None:
            lend(node, self.known_hosts, connection)

    @property
    def known_hosts(self) -> Path:
        """The only known_hosts file trusted: the inventory's."""
        return self.inventory.known_hosts_path

    # --- Operations -----------------------------------------------------------------------

    def run(self, argv: Argv | Mapping[str, Argv], *, timeout: float | None = None,
            stdin: bytes | None = None) -> FleetResult:
        """Run argv on every selected node at once (or, given {node: argv}, each its own).

        timeout bounds the command once started (default: the node's ssh_command_timeout);
        reaching it is "failed", or "unreachable" if the connection turns out to be dead.
        stdin is sent to every command, then closed; prefer it to argv for secrets, which
        the remote `ps` would show.
        """
        commands = self._per_node(argv)
        secrets = secret_values(commands.values())
        return self._parallel(commands, timeout, lambda node: partial(
            self._command, node, commands[node.name], stdin, secrets))

    def stream(self, node: str, argv: Argv, chunks: Iterable[bytes], *,
               timeout: float | None = None) -> NodeResult:
        """Run argv on one node with chunks (an iterable: a file, a generated stream) as
        its stdin, sent as they come, never all in memory; the node's NodeResult."""
        commands = self._per_node({node: argv})
        secrets = secret_values(commands.values())
        return self._parallel(commands, timeout, lambda n: partial(
            self._command, n, commands[n.name], chunks, secrets))[node]

    def put(self, node_files: Mapping[str, Sequence[Upload]], *,
            timeout: float | None = None) -> FleetResult:
        """Write files on nodes over SFTP: {node: [(bytes or local Path, remote path, mode)]}.

        Each file is written beside its target and renamed over it, so no reader ever sees
        half a file. timeout bounds each node's transfers (default: ssh_command_timeout).
        """
        self._check_names(node_files)
        return self._parallel(node_files, timeout, lambda node: partial(
            self._sftp, node, partial(upload, files=node_files[node.name])))

    def get(self, node_paths: Mapping[str, Sequence[str]], *,
            timeout: float | None = None) -> FleetResult:
        """Read files from nodes over SFTP: {node: [remote path]}; contents in result.files."""
        self._check_names(node_paths)
        return self._parallel(node_paths, timeout, lambda node: partial(
            self._sftp, node, partial(download, paths=node_paths[node.name])))

    def docker_client(self, node: str | Node) -> docker.DockerClient:
        """A docker SDK client to node's dockerd over this fleet's connection to node (each
        request a channel on it: no second login). Cached; closed with the fleet.
        UnreachableError (naming the node and why) if no session can be had."""
        from sparkrack.fleet.dockerclient import (
            pinned_docker_client,  # the SDK only when used
        )

        target = self._node(node if isinstance(node, str) else node.name)
        check_node(target)  # an unsafe address is the caller's error, not an unreachable node
        with self._locks[target.name]:
            if target.name not in self._docker:
                try:
                    self._docker[target.name] = pinned_docker_client(
                        target, lambda: self._connection(target)[0].client)
                except _SESSION_ERRORS as error:
                    raise UnreachableError(explain(target, self.known_hosts, error)) from None
            return self._docker[target.name]

    def docker(self, node: str | Node) -> NodeDocker:
        """node's dockerd (fleet/containers.py): its containers as views, what sparkrack
        does to them, image IDs. UnreachableError as docker_client."""
        from sparkrack.fleet.containers import NodeDocker

        target = node if isinstance(node, str) else node.name
        return NodeDocker(self.docker_client(target), target)

    # --- Per-node machinery ---------------------------------------------------------------

    def _per_node(self, argv: Argv | Mapping[str, Argv]) -> dict[str, Argv]:
        """{node name: argv} for run(): one argv for every node, or the mapping checked."""
        if isinstance(argv, Mapping):
            self._check_names(argv)
            commands = dict(argv)
        else:
            commands = {node.name: argv for node in self.nodes}
        for command in commands.values():
            quote_argv(command)  # refuse a bad argv before touching any node
        return commands

    def _check_names(self, names: Iterable[str]) -> None:
        """UsageError unless every name is a selected node."""
        unknown = [name for name in names if name not in self._by_name]
        if unknown:
            raise UsageError(f"not in this fleet: {', '.join(unknown)}",
                             fix="selected nodes: " + ", ".join(self._by_name))

    def _node(self, name: str) -> Node:
        """The selected node called name."""
        self._check_names([name])
        return self._by_name[name]

    def _parallel(self, names: Iterable[str], timeout: float | None,
                  work_for: Callable[[Node], Work]) -> FleetResult:
        """work_for(node) on every named node, each in its own thread; results by rank.

        Every address is checked first, so an unsafe inventory stops the whole operation
        (UnsafeAddressError) before any packet leaves. Interrupted (Ctrl-C) while it waits,
        it closes the operation's channels, so that it returns at once rather than when the
        remote commands end; a remote command then meets a closed pipe at its next write.
        """
        wanted = set(names)
        targets = [node for node in self.nodes if node.name in wanted]
        for node in targets:
            check_node(node)
        if not targets:
            return FleetResult(())
        opened: list[paramiko.Channel] = []
        pool = ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="fleet")
        try:
            futures = [pool.submit(self._on_node, node, timeout, work_for(node), opened)
                       for node in targets]
            return FleetResult(tuple(future.result() for future in futures))
        except BaseException:
            for channel in list(opened):
                close_quietly(channel)
            raise
        finally:
            pool.shutdown(wait=True)

    def _on_node(self, node: Node, timeout: float | None, work: Work,
                 opened: list[paramiko.Channel]) -> NodeResult:
        """work(channel, timeout) on a fresh session channel of node's warm connection (kept
        in opened); "unreachable" if no channel can be had."""
        started = time.monotonic()
        seconds = node.vars.ssh_command_timeout if timeout is None else timeout
        try:
            channel = self._channel(node)
        except _SESSION_ERRORS as error:
            result = NodeResult(node.name, "unreachable", cause=cause(error),
                                error=explain(node, self.known_hosts, error))
        else:
            opened.append(channel)
            result = work(channel, seconds)
        duration = time.monotonic() - started
        log.debug("%s: %s in %.2f s", node.name, result.status, duration)
        return replace(result, duration=duration)

    def _channel(self, node: Node) -> paramiko.Channel:
        """A new session channel to node, on its cached connection if that still works.

        A warm connection whose transport died (the node rebooted, say) is replaced; one
        that stays silent for ssh_connect_timeout is dropped and reported unreachable.
        """
        while True:
            connection, fresh = self._connection(node)
            try:
                return connection.transport.open_session()
            except _SESSION_ERRORS as error:
                died = not connection.transport.is_active()
                self._drop(node, connection)
                if fresh:
                    raise
                if not died:
                    raise UnreachableError(
                        f"{who(node)}: no answer within {node.vars.ssh_connect_timeout:g} s on "
                        "its open connection (connection dropped)") from error

    def _connection(self, node: Node) -> tuple[Connection, bool]:
        """node's cached open connection, else one lent or opened ahead (fleet_warm), else a
        new one; and whether it is new."""
        with self._locks[node.name]:
            connection = self._connections.get(node.name)
            if connection is not None and connection.is_connected:
                return connection, False
            if connection is not None and node.name not in self._borrowed:
                connection.close()
            self._borrowed.discard(node.name)
            lent = borrow(node, self.known_hosts) if self._may_borrow else None
            if lent is not None:
                self._connections[node.name] = lent
                self._borrowed.add(node.name)
                return lent, False
            warm = claim(node, self.known_hosts)
            connection = warm or open_connection(node, self.known_hosts)
            self._connections[node.name] = connection
            return connection, warm is None

    def _drop(self, node: Node, connection: Connection) -> None:
        """Close connection and forget it, unless another thread already replaced it."""
        with self._locks[node.name]:
            if self._connections.get(node.name) is connection:
                del self._connections[node.name]
                self._borrowed.discard(node.name)
        connection.close()

    def _gone(self, node: Node, channel: paramiko.Channel) -> bool:
        """Whether channel's connection is dead (closed, or silent to a probe); if so,
        drop it so the next operation reconnects."""
        transport = channel.get_transport()
        if transport.is_active() and answers(transport, node.vars.ssh_connect_timeout):
            return False
        with self._locks[node.name]:
            connection = self._connections.get(node.name)
        if connection is not None and connection.transport is transport:
            self._drop(node, connection)
        return True

    def _command(self, node: Node, command: Argv, stdin: bytes | Iterable[bytes] | None,
                 secrets: Sequence[str],
                 channel: paramiko.Channel, seconds: float) -> NodeResult:
        """The NodeResult of one command on an open channel, bounded by seconds."""
        shown = _shorten(redact_argv(command))
        try:
            outcome = execute(channel, quote_argv(command), stdin, seconds)
        except _SESSION_ERRORS as error:
            return self._lost(node, channel, f"`{shown}`: {error}")
        stdout = outcome.stdout.decode(errors="replace")
        stderr = outcome.stderr.decode(errors="replace")
        if outcome.exit_code == 0:
            return NodeResult(node.name, "ok", 0, stdout, stderr)
        if outcome.exit_code is not None:
            tail = redact_text(_shorten(_last_line(stderr), _TAIL), secrets)
            error = f"{who(node)}: `{shown}` exited {outcome.exit_code}"
            return NodeResult(node.name, "failed", outcome.exit_code, stdout, stderr,
                              error=f"{error}: {tail}" if tail else error)
        why = (f"timed out after {seconds:g} s" if outcome.timed_out else "broke off"
               if lost_reason(channel.get_transport()) else "ended without status")
        lost = self._lost(node, channel, f"`{shown}` {why}")
        return NodeResult(node.name, lost.status, None, stdout, stderr, error=lost.error)

    def _lost(self, node: Node, channel: paramiko.Channel, what: str) -> NodeResult:
        """The result when an operation broke off: "unreachable" if the connection is dead
        (then dropped), else "failed" (killed by a signal, refused, or just too slow)."""
        if self._gone(node, channel):
            reason = lost_reason(channel.get_transport())
            return NodeResult(node.name, "unreachable", cause="unreachable",
                              error=f"{who(node)}: {what}; the node stopped answering "
                              f"({reason + '; ' if reason else ''}connection dropped)")
        return NodeResult(node.name, "failed", error=f"{who(node)}: {what}")

    def _sftp(self, node: Node, transfer: Callable[[paramiko.SFTPClient], Mapping[str, bytes]],
              channel: paramiko.Channel, seconds: float) -> NodeResult:
        """transfer(sftp) over an SFTP session on channel, bounded by seconds."""
        try:
            with deadline(seconds, partial(close_quietly, channel)) as fired:
                try:
                    channel.invoke_subsystem("sftp")
                    files = transfer(paramiko.SFTPClient(channel))
                except FileError as error:
                    return NodeResult(node.name, "failed", error=f"{who(node)}: {error}")
                except _SESSION_ERRORS as error:
                    why = f"timed out after {seconds:g} s" if fired.is_set() else f"failed: {error}"
                    return self._lost(node, channel, f"transfer {why}")
        finally:
            close_quietly(channel)
        return NodeResult(node.name, "ok", files=FrozenMapping(files))


def _last_line(text: str) -> str:
    """The last non-blank line of text, stripped ('' if none)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _shorten(text: str, limit: int = 80) -> str:
    """text cut to limit characters, with an ellipsis if cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"
