"""The rehearsal rack's PDU: twelve outlets, the inventory's nodes on the outlets its
`pdu:` section gives them, the rest free for other loads (`rehearsal.pdu-load`).

An outlet switched off is a pulled power cord: the node's processes die at once, its
ports go dark and a latched GPU clears (RehearsalRack.poweroff); switched on, the node
boots as `rehearsal.poweron` boots it. An outlet draws what its node draws at the wall
(the simulated GPU's `node_power_w`, read from the node's gpusimd through its network
namespace), the node's idle figure while it boots, 0 W while off.

The agent (pduagent.py) runs on this machine, started by `rehearsal.up` and stopped by
`rehearsal.down`, listening on the PDU's address on the management bridge only. Its
SNMPv3 user and keys are those the inventory's variables hold in the environment of
`rehearsal.up`, else the rehearsal's own (REHEARSAL_CREDENTIALS, in docs/rehearsal.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.inventory.pdu import DEFAULT_ENV, PduConfig
from sparkrack.rehearsal.hostprep import SBIN_DIRS
from sparkrack.rehearsal.layout import PDU_ADDR, PDU_PORT, RUN_DIR

OUTLETS = 12
PID_FILE = RUN_DIR / "pdu.pid"
LOG_FILE = RUN_DIR / "pdu.log"
LOADS_FILE = RUN_DIR / "pdu-loads.json"  # outlet: watts of a load that is no node
# the rehearsal PDU's own SNMPv3 user and keys, as a PDU's factory ones (docs/rehearsal.md)
REHEARSAL_CREDENTIALS = {"SPARKRACK_PDU_USER": "sparkrack",
                         "SPARKRACK_PDU_AUTH_KEY": "rehearsal-auth-key",
                         "SPARKRACK_PDU_PRIV_KEY": "rehearsal-priv-key"}
GPUSIM_PORT = 47800  # gpusimd, on 127.0.0.1 in each node's namespace
CLONE_NEWNET = 0x40000000
READING_TTL_S = 1.0
SIM_DIR = Path(__file__).parent / "sim"


def gpusim_state(netns: str, timeout: float = 0.5) -> dict:
    """The simulated GPU's state, asked of the gpusimd in a node's network namespace."""
    sock = _connect_in(netns, timeout)
    with sock, sock.makefile("rwb") as stream:
        stream.write(b'{"op": "state"}\n')
        stream.flush()
        answer = json.loads(stream.readline() or b"{}")
    if not answer.get("ok"):
        raise ValueError(answer.get("error", "no answer"))
    return answer["state"]


def _connect_in(netns: str, timeout: float) -> socket.socket:
    """A TCP connection to gpusimd made inside netns (a thread of its own enters it, so
    this process stays where it is; the socket keeps the namespace it was made in)."""
    box: dict = {}

    def enter() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {netns}")
            finally:
                os.close(fd)
            box["sock"] = socket.create_connection(("127.0.0.1", GPUSIM_PORT), timeout=timeout)
        except OSError as error:
            box["error"] = error

    worker = threading.Thread(target=enter)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["sock"]


def idle_watts(name: str) -> float:
    """The unit's wall idle figure (the simulator's own, drawn from its name)."""
    if str(SIM_DIR) not in sys.path:
        sys.path.insert(0, str(SIM_DIR))
    from gpusim.config import (
        unit_figures,  # the simulator's package (sim/), not sparkrack's
    )

    return unit_figures(name)["node_idle_w"]


def wedged_watts(name: str) -> float:
    """The unit's wall draw while its host is wedged (rehearsal.wedge-host): its idle figure
    plus the simulator's wedged share of the load span (gpusim/config.py says why)."""
    if str(SIM_DIR) not in sys.path:
        sys.path.insert(0, str(SIM_DIR))
    from gpusim.config import GB10_DEFAULTS

    idle = idle_watts(name)
    return idle + (GB10_DEFAULTS["node_load_w"] - idle) * GB10_DEFAULTS["wedged_power_share"]


def read_loads() -> dict[str, int]:
    """The loads plugged into free outlets: {outlet: watts}."""
    try:
        return {str(k): int(v) for k, v in json.loads(LOADS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def plug_load(pdu: PduConfig | None, outlet: int, watts: int) -> None:
    """Plug a load of watts into a free outlet (0: unplug it)."""
    from sparkrack.core.errors import UsageError

    if not 1 <= outlet <= OUTLETS:
        raise UsageError(f"outlet {outlet}: the rehearsal PDU has outlets 1..{OUTLETS}",
                         fix="choose a free one")
    if pdu is not None and pdu.node_on(outlet):
        raise UsageError(f"outlet {outlet} feeds {pdu.node_on(outlet)}",
                         fix="choose an outlet no node is on")
    if not 0 <= watts <= 2000:
        raise UsageError(f"--watts {watts}: expected 0..2000", fix="e.g. --watts 300")
    loads = read_loads()
    if watts:
        loads[str(outlet)] = watts
    else:
        loads.pop(str(outlet), None)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    LOADS_FILE.write_text(json.dumps(loads) + "\n")


def agent_pid() -> int | None:
    """The running agent's pid, or None."""
    try:
        pid = int(PID_FILE.read_text())
    except (OSError, ValueError):
        return None
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None  # our own child, ended (reaped here)
    except ChildProcessError:
        pass  # started by another process
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def start_agent(inventory_path: Path, pdu: PduConfig | None, say) -> None:
    """Start the PDU's agent unless it runs; wait until it listens."""
    if agent_pid() is not None:
        return
    env = {key: value for key, value in os.environ.items() if not key.startswith("PDU_")}
    names = pdu or PduConfig("", "", ())
    given = [os.environ.get(getattr(names, key)) for key in DEFAULT_ENV]
    values = given if all(given) else [REHEARSAL_CREDENTIALS[DEFAULT_ENV[key]]
                                       for key in DEFAULT_ENV]
    env.update(zip(("PDU_USER", "PDU_AUTH_KEY", "PDU_PRIV_KEY"), values, strict=False))
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), *SBIN_DIRS])
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkrack.rehearsal.pduagent", "--inventory",
             str(inventory_path), "--address", PDU_ADDR, "--port", str(PDU_PORT)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
    PID_FILE.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 15
    while not _listening():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = LOG_FILE.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SparkrackError(f"the rehearsal PDU did not start: {tail[0]}",
                                 fix=f"see {LOG_FILE}")
        time.sleep(0.1)
    say(f"PDU {names.name or 'rehearsal-pdu'}: SNMPv3 at {PDU_ADDR}:{PDU_PORT}, {OUTLETS} outlets")


def stop_agent() -> None:
    """Stop the PDU's agent (SIGTERM, then SIGKILL) and forget the loads plugged in."""
    pid = agent_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while agent_pid() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if agent_pid() is not None:
            os.kill(pid, signal.SIGKILL)
    PID_FILE.unlink(missing_ok=True)
    LOADS_FILE.unlink(missing_ok=True)


def _listening() -> bool:
    """Whether a UDP socket is bound to the PDU's address and port on this machine."""
    wanted = f"{PDU_ADDR}:{PDU_PORT}"
    done = subprocess.run(["ss", "-uln"], capture_output=True, text=True)
    return any(wanted in line for line in done.stdout.splitlines())
