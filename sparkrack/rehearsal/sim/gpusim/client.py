"""Client of gpusimd for nvidia-smi, gpu-sim and the stub engines (stdlib only).

One GpuSimClient is one connection: a load or an allocation made through it lasts until
it is released or the client closes (or its process dies), like a CUDA context.
Address: $GPU_SIM_ADDR ("host:port"), else the port in the node config, else 47800.

nvidia-smi runs this client hundreds of times in a burn check, so it imports only C
modules: `_socket` (socket.py pulls in enum and selectors) and `_json`, the json module's
own C scanner and encoder (json.decoder pulls in re). Together ~15 ms less per call.
"""

import _json
import _socket
import os

from gpusim.config import DEFAULT_PORT, config_path

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Decoding:
    """What json.JSONDecoder gives its C scanner: plain dicts, floats and ints."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _unencodable(value):
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_scan = _json.make_scanner(_Decoding())
# markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan: json.dumps's
_encode = _json.make_encoder(None, _unencodable, _json.encode_basestring_ascii, None, ": ",
                             ", ", False, False, True)


def dumps(value) -> str:
    """value as JSON (what json.dumps gives for dicts, lists, strings, numbers, bools)."""
    return "".join(_encode(value, 0))


def loads(text: str):
    """The one JSON value in text (ValueError otherwise), as json.loads."""
    end = len(text.rstrip())
    start = len(text) - len(text.lstrip())
    try:
        value, at = _scan(text, start)
    except StopIteration as stop:
        raise ValueError(f"no JSON value at {stop.value}") from None
    if at != end:
        raise ValueError(f"extra data at {at}")
    return value


class DaemonUnreachable(Exception):
    """gpusimd does not answer: the 'driver' is not there."""


class DaemonError(Exception):
    """gpusimd refused a request; the message is its reason."""


def daemon_address() -> tuple[str, int]:
    """(host, port) of the node's gpusimd."""
    given = os.environ.get("GPU_SIM_ADDR")
    if given:
        host, _, port = given.rpartition(":")
        return host or "127.0.0.1", int(port)
    try:
        with open(config_path(), encoding="utf-8") as fh:
            return "127.0.0.1", int(loads(fh.read()).get("port", DEFAULT_PORT))
    except (OSError, ValueError):
        return "127.0.0.1", DEFAULT_PORT


class GpuSimClient:
    """A connection to gpusimd; use as a context manager or call close()."""

    def __init__(self, address: tuple[str, int] | None = None, timeout: float = 5.0):
        self._sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._pending = b""
        try:
            self._sock.connect(address or daemon_address())
        except OSError as exc:
            self._sock.close()
            raise DaemonUnreachable(str(exc)) from exc

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self) -> None:
        """Close the connection; the daemon releases what it held."""
        self._sock.close()

    def request(self, op: str, **fields) -> dict:
        """Send one request and return the reply; DaemonError if refused."""
        try:
            self._sock.sendall(dumps({"op": op, **fields}).encode() + b"\n")
            line = self._readline()
        except OSError as exc:
            raise DaemonUnreachable(str(exc)) from exc
        if not line:
            raise DaemonUnreachable("gpusimd closed the connection")
        reply = loads(line.decode())
        if not reply.get("ok"):
            raise DaemonError(reply.get("error", "refused"))
        return reply

    def _readline(self) -> bytes:
        """The next reply line (b"" when the daemon closed the connection)."""
        while b"\n" not in self._pending:
            chunk = self._sock.recv(65536)
            if not chunk:
                return b""
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def state(self) -> dict:
        """Everything the GPU reports right now."""
        return self.request("state")["state"]

    def lock_clocks(self, low: int, high: int) -> None:
        """Lock the GPU clock range in MHz (until reset or reboot)."""
        self.request("lock", min=low, max=high)

    def reset_clocks(self) -> None:
        """Drop the GPU clock lock."""
        self.request("reset")

    def set_persistence(self, enabled: bool) -> bool:
        """Set persistence mode; returns whether it changed."""
        return self.request("persistence", enabled=enabled)["changed"]

    def hold_load(self, util: int = 100, spin: bool = False, kind: str | None = None) -> None:
        """Keep the GPU busy at util % while this client is open (0 releases); kind: what
        the load does (gpusim.physics.KINDS: compute, decode, spin, drained; spin=True is
        kind spin: a kernel waiting on a flag, busy at low power)."""
        if kind is not None and kind != "compute":
            self.request("load", util=util, kind=kind)
        elif spin:
            self.request("load", util=util, spin=True)
        else:
            self.request("load", util=util)

    def allocate(self, size: int, pid: int | None = None, name: str | None = None) -> int:
        """Take size bytes of unified memory until freed or closed; returns its id."""
        return self.request("alloc", bytes=size, pid=os.getpid() if pid is None else pid,
                            name=name or _process_name())["id"]

    def free(self, alloc_id: int) -> None:
        """Free one allocation made through this client."""
        self.request("free", id=alloc_id)

    def open_rails(self, addresses: list[str]) -> list[str]:
        """Have the node's HCAs answer RDMA writes to addresses while this client is open
        (gpusim.hca); the addresses answered."""
        return self.request("rails", addresses=list(addresses))["answered"]

    def collective_hangs(self) -> bool:
        """Whether the node's NCCL hangs its next collective (the rack's fault)."""
        return bool(self.collective()["hang"])

    def collective(self) -> dict:
        """What the next collective meets on this node: hang (the rack's NCCL hang fault)
        and pace (how fast the GPU computes against its unlimited pace, 0-1]."""
        return self.request("collective")

    def rdma(self) -> dict:
        """The node's RDMA devices as the driver shows them (gpusim.rdma.read_rdma)."""
        return self.request("rdma")["hcas"]

    def ports(self) -> dict:
        """The state of each HCA's port 1 (gpusim.rdma.read_port_states)."""
        return self.request("ports")["hcas"]


def _process_name() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].decode() or "python3"
    except OSError:
        return "python3"
