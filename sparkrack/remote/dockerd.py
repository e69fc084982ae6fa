"""dockerd asked over its socket (the Engine API the docker CLI calls, without the CLI):
the local images (`images_section`, run by gather.py) and the daemon itself
(`daemon_section`: its version, its runtimes, the NVIDIA hook on its PATH). Every round
trip carries this part: socket and json are imported where a question asks dockerd."""

import os

DOCKER_SOCKET = "/var/run/docker.sock"
HOOK = "nvidia-container-runtime-hook"


def docker_get(path):
    """(None, parsed JSON) of GET path, or (the error line, None)."""
    import json
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(20)
            conn.connect(DOCKER_SOCKET)
            conn.sendall((f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").encode())
            reply = b"".join(iter(lambda: conn.recv(65536), b""))
    except OSError as error:
        return (f"Cannot connect to the Docker daemon at unix://{DOCKER_SOCKET}. Is the docker daemon "
                f"running? ({error.strerror or error})"), None
    head, _, body = reply.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 200 " not in status + " ":
        return "dockerd answered {}: {}".format(status, body.decode(errors="replace")[:200]), None
    try:
        return None, json.loads(body)
    except ValueError:
        return f"dockerd answered {status} with no JSON", None


def images_section():
    """The local images as `docker images` lists them (`REPO:TAG ID`, `<none>:<none>` for
    an untagged one)."""
    error, images = docker_get("/images/json")
    if error:
        return ["rc 1", error]
    lines = ["rc 0"]
    for image in images:
        for tag in image.get("RepoTags") or ["<none>:<none>"]:
            lines.append("{} {}".format(tag, image["Id"]))
    return lines


def dockerd_pid():
    """The pid of a running dockerd, or None."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as handle:
                    if handle.read().strip() == "dockerd":
                        return entry
            except OSError:
                continue
    return None


def hook_path():
    """Where dockerd finds the NVIDIA container runtime hook on its PATH ("" if nowhere)."""
    pid = dockerd_pid()
    if pid is None:
        return ""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            env = handle.read().split(b"\0")
    except OSError:
        return ""
    path = next((v[5:].decode(errors="replace") for v in env if v.startswith(b"PATH=")), "")
    for folder in path.split(":"):
        candidate = os.path.join(folder, HOOK)
        if folder and os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return candidate
    return ""


def daemon_section():
    """`version V` or `error WHY`, then `runtimes NAME...`, `hook PATH`."""
    error, version = docker_get("/version")
    lines = ["error " + error] if error else ["version {}".format(version.get("Version", ""))]
    if not error:
        _, info = docker_get("/info")
        lines.append("runtimes " + " ".join(sorted((info or {}).get("Runtimes") or {})))
    lines.append("hook " + hook_path())
    return lines
