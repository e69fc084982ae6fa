"""The file transfers of the fleet over SFTP (Fleet.put, Fleet.get): a write lands whole or
not at all (beside its target, private from its first byte, fsync-ed, renamed over it), and
a file operation the node refuses is a FileError naming the path."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import paramiko

Upload = tuple[bytes | Path, str, int]
"""One file to put: (content, or a local file's Path; remote path; mode such as 0o644)."""


class FileError(Exception):
    """The node refused one file operation (no such file, permission denied, ...)."""


@contextmanager
def _about(remote: str) -> Iterator[None]:
    """Turn the node's refusal of an operation on remote into a FileError naming it.

    Such refusals carry an errno; errors without one (a dropped connection) pass through.
    """
    try:
        yield
    except OSError as error:
        if error.errno is None:
            raise
        raise FileError(f"{remote}: {error.strerror}") from None


def upload(sftp: paramiko.SFTPClient, files: Sequence[Upload]) -> Mapping[str, bytes]:
    """Write each file beside its target, private from its first byte, then give it its
    mode and rename it over the target.

    The temporary name is fixed per target: one that a cut connection left (it may hold a
    secret) is removed first, and the new one is created exclusively with mode 0600 in the
    open request itself, so no other user can open it while it is written.
    """
    for source, remote, mode in files:
        target = PurePosixPath(remote)
        temporary = str(target.with_name(f".{target.name}.sparkrack-tmp"))
        content = source.read_bytes() if isinstance(source, Path) else source
        with _about(remote):
            _remove_if_there(sftp, temporary)
            with _create_private(sftp, temporary) as handle:
                handle.write(content)
                handle.flush()
                _fsync(sftp, handle)
            sftp.chmod(temporary, mode)
            sftp.posix_rename(temporary, remote)
    return {}


def _remove_if_there(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.remove(path)
    except FileNotFoundError:
        pass


def _fsync(sftp: paramiko.SFTPClient, handle: paramiko.SFTPFile) -> None:
    """fsync the remote file before it is renamed into place (OpenSSH's fsync@openssh.com
    extension; a server without it gets the rename alone)."""
    try:
        sftp._request(paramiko.sftp.CMD_EXTENDED, "fsync@openssh.com", handle.handle)
    except OSError as error:
        if error.errno is not None:
            raise
        logging.getLogger(__name__).debug("no fsync@openssh.com: %s", error)


def _create_private(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPFile:
    """Open a new file for writing, created with mode 0600 by the server (O_EXCL).

    paramiko's `open` sends no attributes, so the file would be created 0666 & umask and
    chmod-ed only later; this is its request with the permissions attribute set (SFTP v3
    OPEN carries initial attributes; OpenSSH's sftp-server passes them to open(2))."""
    attributes = paramiko.SFTPAttributes()
    attributes.st_mode = 0o600
    flags = paramiko.sftp.SFTP_FLAG_WRITE | paramiko.sftp.SFTP_FLAG_CREATE | \
        paramiko.sftp.SFTP_FLAG_EXCL
    kind, message = sftp._request(paramiko.sftp.CMD_OPEN, path, flags, attributes)
    if kind != paramiko.sftp.CMD_HANDLE:
        raise paramiko.SFTPError("expected a handle")
    return paramiko.SFTPFile(sftp, message.get_binary(), "wb", -1)


def download(sftp: paramiko.SFTPClient, paths: Sequence[str]) -> Mapping[str, bytes]:
    """The content of each remote file, by path."""
    contents = {}
    for remote in paths:
        buffer = io.BytesIO()
        with _about(remote):
            sftp.getfo(remote, buffer)
        contents[remote] = buffer.getvalue()
    return contents
