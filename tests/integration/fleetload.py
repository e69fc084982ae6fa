"""A steady load of streaming clients for the fleet's rack tests: each client sends one
streamed chat completion after another to an address (the router's, or a rack's head), and
every request's outcome is kept: whole (its final chunk, the usage, then [DONE]) or failed
(an HTTP error, a stream cut short, an error event), with when it began and ended."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Outcome:
    began: float
    ended: float
    ok: bool
    why: str = ""
    tokens: int = 0  # content chunks received
    answered: float = 0.0  # when the response's status line came (0: it never did)


@dataclass
class Load:
    """clients streaming clients to host:port until stop(), each request tokens long."""

    host: str
    port: int
    clients: int = 8
    tokens: int = 30
    timeout: float = 10.0  # a silence this long (connecting, or between two reads) fails it
    model: str = "GLM-5.3"
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, daemon=True)
                         for _ in range(self.clients)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Stop sending; wait for the requests in flight to end."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _client(self) -> None:
        while not self._stop.is_set():
            outcome = self.one()
            with self._lock:
                self.outcomes.append(outcome)
            if not outcome.ok:
                time.sleep(0.2)  # a client backs off a little after a failure

    def one(self) -> Outcome:
        began = time.monotonic()
        body = {"model": self.model, "max_tokens": self.tokens, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "a steady client"}]}
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        tokens, answered = 0, 0.0
        try:
            connection.request("POST", "/v1/chat/completions", json.dumps(body),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answered = time.monotonic()
            if answer.status != 200:
                return Outcome(began, time.monotonic(), False,
                               f"HTTP {answer.status}: {answer.read()[:120]!r}", 0, answered)
            usage, done = None, False
            while True:
                line = answer.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event and not event.get("choices"):
                    return Outcome(began, time.monotonic(), False, f"error event: {event}",
                                   tokens, answered)
                for choice in event.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        tokens += 1
                usage = event.get("usage") or usage
            whole = done and usage is not None and usage.get("completion_tokens") == self.tokens
            return Outcome(began, time.monotonic(), whole,
                           "" if whole else f"cut short: {tokens} tokens, done {done}", tokens,
                           answered)
        except (OSError, http.client.HTTPException, ValueError) as error:
            return Outcome(began, time.monotonic(), False,
                           f"{type(error).__name__} after {tokens} tokens: {error}", tokens,
                           answered)
        finally:
            connection.close()

    def failed(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if not o.ok]

    def count(self) -> int:
        with self._lock:
            return len(self.outcomes)
