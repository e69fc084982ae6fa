"""One remote command on one SSH channel, bounded by a deadline whatever the peer does.

paramiko waits without limit in places (the reply to an exec request, a read from a peer
that stopped answering). A watchdog timer closes the channel at the deadline, which wakes
every one of those waits; the caller then learns that the deadline passed.

paramiko can send a channel's EOF after its CLOSE when the command ends while our thread
shuts its stdin (paramiko issues #1115, #1705): OpenSSH's sshd then drops the whole
connection ("ieof packet referred to nonexistent channel"), and with it every command
running beside on that node. So a command without stdin reads /dev/null and we never send
its EOF; with stdin, the EOF is not sent once the command has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial

import paramiko

CHUNK = 1 << 16


@dataclass(frozen=True)
class Outcome:
    """What a command did: exit_code None if it never reported one (timed out, killed,
    connection lost)."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool


@contextmanager
def deadline(seconds: float, expire: Callable[[], None]) -> Iterator[threading.Event]:
    """Call expire() if the block still runs after seconds; yields the 'it fired' event."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        expire()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def execute(channel: paramiko.Channel, command: str, stdin: bytes | Iterable[bytes] | None,
            timeout: float) -> Outcome:
    """Run command on a fresh session channel, feeding stdin (bytes, or chunks streamed as
    they come); closes the channel."""
    try:
        with deadline(timeout, partial(close_quietly, channel)) as fired:
            try:
                channel.exec_command(command if stdin is not None else f"{command} </dev/null")
            except paramiko.SSHException:
                if not fired.is_set():
                    raise  # the node refused the exec request
                return Outcome(None, b"", b"", timed_out=True)
            stdout, stderr = _exchange(channel, stdin)
            channel.status_event.wait()  # set by exit-status, or when the channel closes
        reported = channel.exit_status != -1  # -1: the channel closed without a status
        return Outcome(channel.exit_status if reported else None, stdout, stderr,
                       timed_out=fired.is_set() and not reported)
    finally:
        close_quietly(channel)


def close_quietly(channel: paramiko.Channel) -> None:
    """Close channel; on a dead transport the goodbye may fail, which changes nothing."""
    with suppress(paramiko.SSHException, OSError, EOFError):
        channel.close()


def _exchange(channel: paramiko.Channel,
              stdin: bytes | Iterable[bytes] | None) -> tuple[bytes, bytes]:
    """Send stdin, if any, then EOF while reading stdout and stderr until the remote ends
    them."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="fleet-io") as pool:
        stderr = pool.submit(_read_all, channel.recv_stderr)
        if stdin is not None:
            pool.submit(_feed, channel, stdin)
        stdout = _read_all(channel.recv)
        return stdout, stderr.result()


def _read_all(recv: Callable[[int], bytes]) -> bytes:
    """Everything one stream yields until EOF or until the channel is closed."""
    chunks = []
    while chunk := recv(CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def _feed(channel: paramiko.Channel, data: bytes | Iterable[bytes]) -> None:
    """Write data (or each chunk of it) to the command's stdin and close it; a command may
    exit without reading (then no EOF follows: see the module doc)."""
    try:
        for chunk in [data] if isinstance(data, bytes) else data:
            if chunk:
                channel.sendall(chunk)
        if not (channel.closed or channel.exit_status_ready()):
            channel.shutdown_write()
    except OSError:
        pass  # the channel closed first (the command exited or the deadline passed)
