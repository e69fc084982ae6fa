"""HTTP of a stub rank: OpenAI-compatible API, health, info and Prometheus metrics.

The handler only speaks HTTP (JSON bodies, chunked SSE); what each route answers comes
from the rank (api.py, worker.py): `routes()` maps (method, path) to a function taking the
parsed JSON body (or None) and returning a Reply or a Stream.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """A whole response."""

    status: int = 200
    body: object = None  # dict/list: JSON; str: text; None: empty
    content_type: str | None = None


@dataclass
class Stream:
    """A server-sent-events response: each item of events is one `data:` payload."""

    events: Iterator[str]
    headers: dict = field(default_factory=dict)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # BaseHTTPRequestHandler's signature
        log = getattr(self.server, "access_log", None)
        if log is not None:
            code = args[1] if len(args) > 1 else ""
            log(f'{self.client_address[0]} - "{self.requestline}" {code}')

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        route = self.server.routes().get((method, path))
        if route is None:
            known = {p for m, p in self.server.routes() if p == path}
            self._drain_body()
            self._send(Reply(405 if known else 404, {"detail": "Method Not Allowed" if known
                                                     else "Not Found"}))
            return
        body = None
        if method == "POST":
            raw = self._drain_body()
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as error:
                self._send(Reply(400, _error(f"invalid JSON body: {error}")))
                return
            if not isinstance(body, dict):
                self._send(Reply(400, _error("the body must be a JSON object")))
                return
        answer = route(body)
        if isinstance(answer, Stream):
            self._stream(answer)
        else:
            self._send(answer)

    def _drain_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: Reply) -> None:
        body = reply.body
        if isinstance(body, (dict, list)):
            data, kind = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            data, kind = body.encode(), "text/plain; charset=utf-8"
        else:
            data, kind = b"", "application/json"
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type or kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _stream(self, stream: Stream) -> None:
        """Send each event as it comes (chunked transfer encoding), then [DONE]."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            for key, value in stream.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            _close(stream.events)
            return
        try:
            for event in stream.events:
                self._chunk(f"data: {event}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except OSError:
            self.close_connection = True
            _close(stream.events)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _close(events: Iterator[str]) -> None:
    close = getattr(events, "close", None)
    if close is not None:
        close()


def _error(message: str, kind: str = "BadRequestError", code: int = 400) -> dict:
    """An OpenAI-style error body."""
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


class Server(ThreadingHTTPServer):
    """A threaded HTTP server whose routes come from a callable (so they can change)."""

    daemon_threads = True
    allow_reuse_address = True
    # vLLM and SGLang serve their API through uvicorn, whose listen backlog is 2048
    # (uvicorn/config.py, Config(backlog=2048)); socketserver's own is 5, with which the
    # kernel drops a client's SYN as soon as a handful of connections wait to be accepted
    # (a router opening connections for a burst of requests): its connect then waits 1 s
    # and more for the SYN to be sent again, which no engine does at that load
    request_queue_size = 2048

    def __init__(self, host: str, port: int, routes: Callable[[], dict],
                 access_log: Callable[[str], None] | None = None, activate: bool = True):
        self.routes = routes
        self.access_log = access_log
        super().__init__((host, port), Handler, bind_and_activate=False)
        try:
            self.server_bind()
            if activate:
                self.server_activate()
        except OSError:
            self.server_close()
            raise

    def server_bind(self) -> None:
        """Bind without HTTPServer's socket.getfqdn (a DNS lookup: slow with no DNS)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def serve_in_background(self) -> None:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                         name="http", daemon=True).start()


error_body = _error
