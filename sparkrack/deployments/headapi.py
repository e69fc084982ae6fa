"""The one HTTP client of the engines' endpoints: health, models, metrics, chat
completions whole or streamed with timestamps (start, watch, the smoke request, bench).

Every connection goes to the address netguard vetted for the node, with a timeout. A
streamed request asks for `stream_options.include_usage`, so the token counts are the
server's; each piece of the answer is timestamped on arrival. `Cancel` closes every open
connection at once, so Ctrl-C never waits for an answer to finish.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet.netguard import check_node
from sparkrack.inventory import Node

DONE = object()  # the `data: [DONE]` event


class HeadError(SparkrackError):
    """A request to an endpoint failed (the message names the endpoint and the answer)."""


class Cancelled(Exception):
    """The request was cancelled (Ctrl-C stopped its caller) while it ran."""


class Cancel:
    """Open connections, so that stop() can close them from another thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self.stopped = threading.Event()

    def add(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if self.stopped.is_set():
                raise Cancelled()
            self._open.add(connection)

    def discard(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(connection)

    def stop(self) -> None:
        """Close every open connection (their readers get an error and give up)."""
        self.stopped.set()
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            connection.close()


@dataclass
class Streamed:
    """One streamed completion as it arrived."""

    sent: float  # time.monotonic() when the request was sent
    times: list[float] = field(default_factory=list)  # arrival of each non-empty piece
    text: str = ""
    usage: dict | None = None
    finish_reason: str | None = None
    ended: float | None = None

    @property
    def first(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def last(self) -> float | None:
        return self.times[-1] if self.times else None

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first token (queueing + prefill)."""
        return None if self.first is None else self.first - self.sent

    @property
    def completion_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return value if isinstance(value, int) else None

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None


def parse_sse_line(line: bytes | str):
    """The payload of one SSE line: a dict for `data: {...}`, DONE for `data: [DONE]`,
    None for anything else (blank lines, comments, other fields)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return DONE
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def piece_text(chunk: dict) -> str:
    """The generated text a chunk carries: chat deltas (content, or a reasoning parser's
    reasoning_content / reasoning) or completion text."""
    parts = []
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("reasoning_content", "reasoning", "content"):
                if isinstance(delta.get(key), str):
                    parts.append(delta[key])
        elif isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)


def finish_reason(chunk: dict) -> str | None:
    for choice in chunk.get("choices") or []:
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return choice["finish_reason"]
    return None


class Endpoint:
    """An engine's HTTP API on a node (rank 0's, a worker's health), reached at the node's
    vetted address."""

    def __init__(self, node: Node, port: int, model: str | None = None):
        self.node = node
        self.port = port
        self.model = model

    @property
    def where(self) -> str:
        return f"{self.node.name}:{self.port}"

    def _connect(self, timeout: float, cancel: Cancel | None) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(check_node(self.node), self.port, timeout=timeout)
        if cancel is not None:
            cancel.add(connection)
        return connection

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """(status, body) of GET path; HeadError if nothing answers."""
        connection = self._connect(timeout, None)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise HeadError(f"rank 0 at {self.where}: GET {path}: {_short(exc)}") from None
        finally:
            connection.close()

    def status(self, path: str, timeout: float = 2.0) -> int | None:
        """HTTP status of GET path, or None when nothing answers."""
        try:
            return self.get(path, timeout)[0]
        except HeadError:
            return None

    def get_json(self, path: str, timeout: float = 5.0) -> dict | None:
        """The JSON object GET path answers with 200, else None."""
        status, body = self.get(path, timeout)
        if status != 200:
            return None
        try:
            data = json.loads(body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def body(self, messages: list[dict], max_tokens: int, *, stream: bool,
             ignore_eos: bool = False) -> dict:
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        if self.model:
            body["model"] = self.model
        if ignore_eos:
            body["ignore_eos"] = True  # SGLang and vLLM sampling parameter
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def chat(self, messages: list[dict], max_tokens: int, *, timeout: float = 120.0,
             cancel: Cancel | None = None) -> dict:
        """One whole (non-streamed) chat completion; its parsed body."""
        with self._exchange(timeout, cancel, "chat completion") as connection:
            response = self._post(connection, self.body(messages, max_tokens, stream=False))
            data = response.read()
            if response.status != 200:
                raise HeadError(self._refused(response.status, data))
            return json.loads(data)

    def stream_chat(self, messages: list[dict], max_tokens: int, *, ignore_eos: bool = True,
                    timeout: float = 120.0, cancel: Cancel | None = None,
                    on_piece: Callable[[Streamed], None] | None = None) -> Streamed:
        """One streamed chat completion, every piece timestamped on arrival. timeout bounds
        each wait for data (a long prefill needs a long one). Cancelled if cancel stopped it."""
        with self._exchange(timeout, cancel, "streamed chat completion") as connection:
            result = Streamed(sent=time.monotonic())
            response = self._post(connection, self.body(messages, max_tokens, stream=True,
                                                        ignore_eos=ignore_eos))
            if response.status != 200:
                raise HeadError(self._refused(response.status, response.read()))
            pieces = []
            while True:
                line = response.readline()
                now = time.monotonic()
                if not line:
                    break
                event = parse_sse_line(line)
                if event is DONE:
                    break
                if event is None:
                    continue
                if event.get("object") == "error" or ("error" in event and not event.get("choices")):
                    raise HeadError(f"rank 0 at {self.where}: the stream ended with an error: "
                                     f"{_message(event)}")
                text = piece_text(event)
                if text:
                    result.times.append(now)
                    pieces.append(text)
                    if on_piece is not None:
                        on_piece(result)
                result.finish_reason = finish_reason(event) or result.finish_reason
                if isinstance(event.get("usage"), dict):
                    result.usage = event["usage"]
            result.ended = time.monotonic()
            result.text = "".join(pieces)
            if result.usage is None:
                raise HeadError(f"rank 0 at {self.where}: the stream carried no usage "
                                 "(stream_options.include_usage): token counts unknown")
            return result

    @contextmanager
    def _exchange(self, timeout: float, cancel: Cancel | None,
                  what: str) -> Iterator[http.client.HTTPConnection]:
        """A connection to rank 0 for one request: a broken one is a HeadError naming what
        was asked (Cancelled when cancel stopped it); closed (and forgotten by cancel) after."""
        connection = self._connect(timeout, cancel)
        try:
            yield connection
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if cancel is not None and cancel.stopped.is_set():
                raise Cancelled() from None
            raise HeadError(f"rank 0 at {self.where}: {what}: {_short(exc)}") from None
        finally:
            if cancel is not None:
                cancel.discard(connection)
            connection.close()

    def _post(self, connection: http.client.HTTPConnection, body: dict) -> http.client.HTTPResponse:
        connection.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                           {"Content-Type": "application/json", "Accept": "text/event-stream"})
        return connection.getresponse()

    def _refused(self, status: int, data: bytes) -> str:
        try:
            detail = _message(json.loads(data))
        except ValueError:
            detail = data.decode(errors="replace").strip()[:200]
        return f"rank 0 at {self.where} answered HTTP {status}: {detail}"


def parse_prometheus(text: str) -> dict[str, float]:
    """{sample name: value} of a Prometheus text exposition (prometheus_client's parser),
    label sets summed; a counter keeps its `_total`. Text the parser rejects gives {}: an
    endpoint that serves no readable metrics exposes nothing."""
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    except ValueError:
        return {}
    return values


def _message(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])[:300]
    return str(body)[:300]


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
