"""The rank's start record: its engine version, argv and environment, printed as one JSON
line (secrets shown as ***) and kept in full in /tmp/sparkrack-stub-rank<R>.json."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from . import cli

RECORD_NAME = "sparkrack-stub-rank{rank}.json"  # in /tmp ($SPARKRACK_STUB_RECORD_DIR: tests)
SECRET_MARKS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")
ENTRY = {"sglang": ["python3", "-m", "sglang.launch_server"], "vllm": ["vllm"]}
VERSIONS = {engine: cli.installed_version(engine) for engine in ("sglang", "vllm")}


def _shown_env(env: dict[str, str]) -> dict[str, str]:
    """env with secret-looking values (HF_TOKEN, ...) replaced by *** for the logs."""
    return {key: "***" if any(mark in key.upper() for mark in SECRET_MARKS) else value
            for key, value in env.items()}


def _cmdline() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0")[:-1]]
    except OSError:
        return list(sys.argv)


def record_start(engine: str, argv: list[str]) -> dict:
    """Print the start record (secrets shown as ***) and write it, in full, to
    /tmp/sparkrack-stub-rank<R>.json (mode 0600); returns the record."""
    rank = cli.scan_rank(argv)
    env = dict(os.environ)
    record = {"sparkrack_stub": engine, "event": "start", "rank": rank,
              "argv": ENTRY[engine] + list(argv), "cmdline": _cmdline(), "env": env,
              "pid": os.getpid(), "node": socket.gethostname(), "time": time.time(),
              "version": VERSIONS[engine]}
    print(json.dumps({**record, "env": _shown_env(env)}, sort_keys=True), flush=True)
    path = os.path.join(os.environ.get("SPARKRACK_STUB_RECORD_DIR", "/tmp"),
                        RECORD_NAME.format(rank=rank))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, sort_keys=True, indent=1)
    except OSError as error:
        print(f"sparkrack stub: cannot write {path}: {error}", file=sys.stderr, flush=True)
    return record
