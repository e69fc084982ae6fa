"""Each node's dockerd through the fleet: the one door to docker's API.

`fleet.docker(node)` gives a `NodeDocker`: the containers (found by label or by name) as
plain `Container` views, and the few things sparkrack does to them (create, start, stop,
remove, read logs, run a program once to its end) and to images (an image's ID and
labels). The docker SDK, its objects and its errors stay inside sparkrack/fleet/: a
container that does not exist is `ContainerNotFound`; anything else docker or the
connection says is raised as it came (callers report it per node).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import docker.errors
import requests.exceptions


class ContainerNotFound(LookupError):
    """No container of that name or ID on the node."""


class OutputTooLong(Exception):
    """A program run to its end printed more than it may (read no further)."""


@dataclass(frozen=True)
class Container:
    """One container as docker reports it."""

    id: str
    name: str
    status: str  # created | running | paused | restarting | exited | dead
    labels: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None  # None while it runs
    health: str | None = None  # the HEALTHCHECK's status, when the image has one
    created: str = ""  # docker's RFC 3339 creation time
    image: str = ""  # the ref it was created from
    image_id: str = ""
    argv: tuple[str, ...] = ()  # entrypoint then command
    mounts: tuple[str, ...] = ()  # the host paths bound into it

    @property
    def alive(self) -> bool:
        return self.status in ("running", "restarting", "paused")


def view(container: Any) -> Container:
    """The Container view of a docker SDK container object."""
    state = container.attrs.get("State", {})
    state = state if isinstance(state, dict) else {}
    health = state.get("Health")
    config = container.attrs.get("Config") or {}
    return Container(
        id=container.id, name=container.name, status=container.status,
        labels=dict(container.labels or {}),
        exit_code=state.get("ExitCode") if container.status != "running" else None,
        health=health.get("Status") if isinstance(health, dict) else None,
        created=str(container.attrs.get("Created", "")), image=str(config.get("Image") or ""),
        image_id=str(container.attrs.get("Image") or ""),
        argv=tuple(str(a) for a in [*(config.get("Entrypoint") or []),
                                     *(config.get("Cmd") or [])]),
        mounts=tuple(str(m.get("Source", "")) for m in container.attrs.get("Mounts") or []
                     if isinstance(m, dict)))


class LogStream:
    """A container's log as chunks of bytes; close() ends it from another thread."""

    def __init__(self, stream: Any):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._stream)

    def close(self) -> None:
        """docker-py refuses to cancel a stream over SSH (CancellableStream.close), so the
        SSH channel under it is closed instead."""
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
            return
        except Exception:
            pass
        response = getattr(self._stream, "_response", None)
        channel = getattr(getattr(getattr(getattr(response, "raw", None), "_fp", None),
                                  "fp", None), "channel", None)
        if channel is not None:
            channel.close()


def _read_within(chunks: Any, limit: int, said: str) -> bytes:
    """The bytes of a log stream (or of a whole log), up to limit; OutputTooLong(said) past
    it. The stream is closed either way (as LogStream closes one over SSH)."""
    if isinstance(chunks, bytes):
        chunks = [chunks]
    stream = LogStream(chunks)
    kept: list[bytes] = []
    size = 0
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise OutputTooLong(f"{said} (read no further)")
            kept.append(chunk)
    finally:
        stream.close()
    return b"".join(kept)


def _tar_of(files: dict[str, bytes]) -> bytes:
    """A tar of files (absolute path -> content, mode 0644) and their folders (0755), to
    put at / with put_archive."""
    buffer = io.BytesIO()
    folders = sorted({"/".join(parts[:i]) for path in files
                      for parts in [path.strip("/").split("/")] for i in range(1, len(parts))})
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path.strip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class NodeDocker:
    """One node's dockerd, over the fleet's SSH (Fleet.docker)."""

    def __init__(self, client: Any, node: str):
        self._client = client
        self.node = node

    def containers(self, *, labels: Sequence[str] = (), name: str | None = None
                   ) -> list[Container]:
        """Every container (running or not) carrying all labels (KEY or KEY=VALUE), or the
        one named exactly name."""
        filters: dict[str, Any] = {}
        if labels:
            filters["label"] = list(labels)
        if name is not None:
            filters["name"] = f"^/{name}$"
        return [view(c) for c in self._client.containers.list(all=True, filters=filters)]

    def container(self, name: str) -> Container:
        """The container called name (or with that ID)."""
        return view(self._get(name))

    def create(self, **kwargs: Any) -> None:
        """Create (not start) a container from docker SDK keyword arguments
        (engines.docker_sdk_kwargs)."""
        self._client.containers.create(**kwargs)

    def start(self, name: str) -> None:
        self._get(name).start()

    def stop(self, name: str, timeout: int) -> None:
        """Stop it (SIGTERM, then SIGKILL after timeout seconds); a stopped one is left."""
        container = self._get(name)
        if view(container).alive:
            container.stop(timeout=timeout)

    def signal(self, name: str, signal: str) -> None:
        """Send signal (e.g. SIGTERM) to its main process and return at once (a drain)."""
        self._get(name).kill(signal=signal)

    def kill(self, name: str) -> None:
        """SIGKILL its main process now, as the kernel's OOM killer would (a chaos fault)."""
        self._get(name).kill()

    def remove(self, name: str) -> None:
        """Remove it, running or not."""
        self._get(name).remove(force=True)

    def logs(self, name: str, *, tail: int | str = "all") -> bytes:
        """The last tail lines the container printed."""
        return self._get(name).logs(tail=tail)

    def log_stream(self, name: str, *, tail: int | str = "all", since: float | None = None,
                   follow: bool = False) -> LogStream:
        """What the container printed, as timestamped chunks while they come (follow: until
        the container stops or the stream is closed)."""
        options: dict[str, Any] = {"tail": tail, "follow": follow, "stream": True,
                                   "timestamps": True}
        if since is not None and since > 0:
            options["since"] = float(since)
        return LogStream(self._get(name).logs(**options))

    def run_to_end(self, image: str, argv: Sequence[str], *, name: str, files: dict[str, bytes],
                   timeout: float, labels: dict[str, str], limits: dict[str, Any],
                   output_limit: int) -> tuple[int, bytes, bytes]:
        """(exit code, stdout, stderr) of argv run once in a fresh container of image, without
        a network or a GPU, within limits (docker's create options: mem_limit, nano_cpus,
        cap_drop, log_config, ...), with files (absolute path -> content, mode 0644) put in
        first; the container is removed whatever happens. TimeoutError past timeout
        seconds; OutputTooLong when stdout or stderr holds over output_limit bytes (each is
        read that far and no further)."""
        container = self._client.containers.create(
            image, entrypoint=list(argv[:1]), command=list(argv[1:]), name=name,
            network_disabled=True, labels=labels, detach=True, **limits)
        try:
            if files:
                container.put_archive("/", _tar_of(files))
            container.start()
            try:
                code = container.wait(timeout=timeout)["StatusCode"]
            except requests.exceptions.RequestException:
                raise TimeoutError(f"{' '.join(argv)} in {image} on {self.node} did not end "
                                   f"within {timeout:.0f} s") from None
            out, err = (_read_within(container.logs(stdout=stream == "stdout",
                                                    stderr=stream == "stderr", stream=True),
                                     output_limit, f"{' '.join(argv[:1])} in {image} on "
                                     f"{self.node} printed over {output_limit:,} bytes on "
                                     f"{stream}") for stream in ("stdout", "stderr"))
            return code, out, err
        finally:
            container.remove(force=True)

    def image_info(self, ref: str) -> tuple[str, dict[str, str]] | None:
        """(ID, labels) of the image ref names on the node, or None when it has no such
        image."""
        try:
            image = self._client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        return image.id, dict(image.labels or {})

    def _get(self, name: str) -> Any:
        try:
            return self._client.containers.get(name)
        except docker.errors.NotFound:
            raise ContainerNotFound(f"no container {name} on {self.node}") from None
