"""The fleet's router on this machine for a rehearsal of two racks (`rehearsal.up --racks
2`): SMG (`smg launch`, the package's pinned release) as a background process at the
fleet file's address, this machine's on rack 1's management network, reaching both racks'
heads; its argv is the systemd unit's (racks/routerunit.py). docs/fleet.md#the-rehearsal
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.racks.fleetfile import load_fleet
from sparkrack.racks.router import Router, RouterError
from sparkrack.racks.routerunit import router_argv
from sparkrack.rehearsal.layout import RUN_DIR

FLEET_FILE = "fleet-rehearsal.yml"  # beside the racks' inventory folders
PID_FILE = RUN_DIR / "router.pid"
LOG_FILE = RUN_DIR / "router.log"
START_TIMEOUT_S = 30.0


def fleet_file(inventory: Path) -> Path:
    """The rehearsal fleet's file beside rack 1's inventory folder."""
    return inventory.parent / FLEET_FILE


def smg_command() -> str:
    """The `smg` of this interpreter's environment (the `fleet` extra), else on PATH."""
    here = Path(sys.executable).with_name("smg")
    found = str(here) if here.exists() else shutil.which("smg")
    if found is None:
        raise SparkrackError("the fleet's router, smg, is not installed here",
                             fix="pip install 'sparkrack[fleet]' (smg 1.13.0)")
    return found


def router_pid() -> int | None:
    """The running router's pid, or None."""
    try:
        pid = int(PID_FILE.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def start_router(inventory: Path, say) -> None:
    """Start the rehearsal fleet's router unless it runs; wait until its API answers."""
    fleet = load_fleet(fleet_file(inventory))
    if router_pid() is not None:
        return
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOG_FILE, "ab") as log:
        proc = subprocess.Popen(router_argv(fleet.router, smg=smg_command()),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    PID_FILE.write_text(f"{proc.pid}\n")
    api = Router(fleet.router)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            api.workers()
            break
        except RouterError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = LOG_FILE.read_text(errors="replace").strip().splitlines()[-1:]
                raise SparkrackError(f"the fleet's router did not start: "
                                     f"{(tail or ['no output'])[0][:200]}",
                                     fix=f"see {LOG_FILE}") from None
            time.sleep(0.2)
    say(f"fleet router (SMG) at {fleet.router.url}, metrics on port {fleet.router.metrics_port}")


def stop_router() -> None:
    """Stop the router (SIGTERM, then SIGKILL)."""
    pid = router_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while router_pid() is not None and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if router_pid() is not None:
            os.kill(pid, signal.SIGKILL)
    PID_FILE.unlink(missing_ok=True)
