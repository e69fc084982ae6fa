"""The daemon's line-delimited JSON protocol on 127.0.0.1, one thread per connection (its
requests and answers: docs/rehearsal.md#the-simulators).
"""

import itertools
import json
import socketserver
import sys

from gpusim.hca import Responders
from gpusim.peers import peer_pid
from gpusim.physics import KINDS
from gpusim.rdma import read_port_states, read_rdma
from gpusim.state import GpuState, OutOfMemory

MAX_LINE = 65536


class RequestError(Exception):
    """A request the daemon refuses; its text goes back to the client."""


class Client:
    """One connection: its id, its process (looked up once when first needed) and the
    node's HCAs it may open rails on."""

    def __init__(self, number: int, pid_of, responders: Responders):
        self.id = number
        self.responders = responders
        self._pid_of = pid_of
        self._pid: int | None = None
        self._looked = False

    def pid(self) -> int | None:
        if not self._looked:
            self._pid, self._looked = self._pid_of(), True
        return self._pid


def _int_field(request: dict, key: str, low: int, high: int | None = None,
               default: int | None = None) -> int:
    value = request.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (
            high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise RequestError(f"'{key}' must be an integer {bounds}")
    return value


def _op_state(state: GpuState, client: Client, request: dict) -> dict:
    return {"state": state.snapshot()}


def _op_lock(state: GpuState, client: Client, request: dict) -> dict:
    low = _int_field(request, "min", 0)
    high = _int_field(request, "max", 1)
    if low > high:
        raise RequestError("'min' must not exceed 'max'")
    state.set_clock_lock(low, high)
    _log(f"GPU clocks locked to {low},{high} MHz")
    return {}


def _op_reset(state: GpuState, client: Client, request: dict) -> dict:
    state.reset_clock_lock()
    _log("GPU clocks reset")
    return {}


def _op_persistence(state: GpuState, client: Client, request: dict) -> dict:
    enabled = request.get("enabled")
    if not isinstance(enabled, bool):
        raise RequestError("'enabled' must be true or false")
    changed = state.set_persistence_mode(enabled)
    if changed:
        _log(f"persistence mode {'enabled' if enabled else 'disabled'}")
    return {"changed": changed}


def _op_load(state: GpuState, client: Client, request: dict) -> dict:
    spin = request.get("spin", False)
    if not isinstance(spin, bool):
        raise RequestError("'spin' must be true or false")
    kind = request.get("kind", "spin" if spin else "compute")
    if kind not in KINDS or (spin and kind != "spin"):
        raise RequestError(f"'kind' must be one of {', '.join(KINDS)}")
    state.hold_load(client.id, _int_field(request, "util", 0, 100), kind, pid=client.pid())
    return {}


def _op_alloc(state: GpuState, client: Client, request: dict) -> dict:
    size = _int_field(request, "bytes", 1)
    pid = _int_field(request, "pid", 0, default=0)
    name = str(request.get("name", "unknown"))
    try:
        return {"id": state.allocate(client.id, size, pid, name)}
    except OutOfMemory as exc:
        raise RequestError(f"out of memory: {exc}") from exc


def _op_free(state: GpuState, client: Client, request: dict) -> dict:
    if not state.free(client.id, _int_field(request, "id", 1)):
        raise RequestError("no such allocation on this connection")
    return {}


def _op_ports(state: GpuState, client: Client, request: dict) -> dict:
    return {"hcas": read_port_states()}


def _op_rdma(state: GpuState, client: Client, request: dict) -> dict:
    hcas = read_rdma()
    if state.kernel["reg_mr_error"]:  # KHO's CMA: ibv_reg_mr fails on every device once
        for hca in hcas.values():  # the node has committed reg_mr_limit_kb
            hca["reg_mr_error"] = state.kernel["reg_mr_error"]
            hca["reg_mr_limit_kb"] = state.kernel["reg_mr_limit_kb"]
    return {"hcas": hcas}


def _op_rails(state: GpuState, client: Client, request: dict) -> dict:
    addresses = request.get("addresses")
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise RequestError("'addresses' must be a list of IPv4 addresses")
    return {"answered": client.responders.open(client.id, addresses)}


def _op_collective(state: GpuState, client: Client, request: dict) -> dict:
    return {"hang": state.collective_hangs(), "pace": state.pace()}


OPERATIONS = {
    "state": _op_state,
    "lock": _op_lock,
    "reset": _op_reset,
    "persistence": _op_persistence,
    "load": _op_load,
    "alloc": _op_alloc,
    "free": _op_free,
    "rdma": _op_rdma,
    "ports": _op_ports,
    "rails": _op_rails,
    "collective": _op_collective,
}


def answer(state: GpuState, client: Client, line: bytes) -> dict:
    """The reply to one request line from a client (never raises)."""
    try:
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise RequestError(f"bad JSON: {exc}") from exc
        if not isinstance(request, dict):
            raise RequestError("a request is a JSON object")
        op = request.get("op")
        if not isinstance(op, str) or op not in OPERATIONS:
            raise RequestError(f"unknown op {op!r}; known: {', '.join(OPERATIONS)}")
        return {"ok": True, **OPERATIONS[op](state, client, request)}
    except RequestError as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:  # a daemon bug must not drop the client's holdings
        return {"ok": False, "error": f"internal error: {exc!r}"}


class _Connection(socketserver.StreamRequestHandler):
    """One client: answer its lines; what it held is released when it goes."""

    def handle(self):
        server = self.server.server_address
        client = Client(next(self.server.client_ids),
                        lambda: peer_pid(server, self.client_address[:2]),
                        self.server.responders)
        try:
            while True:
                line = self.rfile.readline(MAX_LINE)
                if not line:
                    return
                if not line.endswith(b"\n") and len(line) == MAX_LINE:
                    self._reply({"ok": False, "error": f"request longer than {MAX_LINE} bytes"})
                    return
                if line.strip():
                    self._reply(answer(self.server.gpu, client, line))
        except OSError:
            return
        finally:
            self.server.gpu.release_client(client.id)
            self.server.responders.release(client.id)

    def _reply(self, response: dict) -> None:
        self.wfile.write(json.dumps(response).encode() + b"\n")
        self.wfile.flush()


class GpuSimServer(socketserver.ThreadingTCPServer):
    """TCP server bound to 127.0.0.1:port serving one GpuState."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, gpu: GpuState, port: int):
        self.gpu = gpu
        self.responders = Responders(gpu.config["roce_port"])
        self.client_ids = itertools.count(1)
        super().__init__(("127.0.0.1", port), _Connection)


def _log(message: str) -> None:
    print(f"gpusimd: {message}", file=sys.stderr, flush=True)
