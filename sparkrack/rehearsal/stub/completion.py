"""One completion request: its tokens, paced at tokens_per_s through a forward of the whole
group, as OpenAI-compatible SSE chunks or one body; the answer's words from text.py."""

from __future__ import annotations

import json
import time
import uuid

from .server import Reply
from .text import token_text


class Completion:
    """One accepted request (head: rank 0, which runs its forward and counts it)."""

    def __init__(self, head, chat: bool, prompt_tokens: int, count: int, reason: str,
                 model: str, answer: list[str] | None = None):
        self.head = head
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.count = count
        self.reason = reason
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.seed = prompt_tokens
        self.arrived = time.monotonic()  # TTFT counts the queue and the prefill, as engines do
        self.answer = answer or []  # the first words (the needle's passphrase), then filler
        self._settled = False
        self._generated = 0

    def _settle(self, seconds: float = 0.0) -> None:
        if not self._settled:
            self._settled = True
            self.head.finished(self.prompt_tokens, self._generated, self.reason, seconds)

    def tokens(self):
        """Yield each token text at the configured rate (first one right after prefill)."""
        head = self.head
        interval = 1.0 / head.settings.tokens_per_s if head.settings.tokens_per_s else 0.0
        first = began = time.monotonic()
        try:
            with head.forward(self.prompt_tokens):
                head.metrics.prompt(self.prompt_tokens)
                first = due = time.monotonic()
                last = self.arrived  # the first token's latency runs from the arrival
                for index in range(self.count):
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    due += interval / head.pace()  # a slowed rank slows every step
                    head.moving(began)
                    self._generated += 1
                    now = time.monotonic()
                    head.metrics.token(now - last, index == 0)
                    last = now
                    if index < len(self.answer):
                        yield self.answer[index] if index == 0 else " " + self.answer[index]
                    else:
                        yield token_text(index, self.seed)
                head.moving(time.monotonic())  # the request ends with its step: not in a hang
        finally:
            self._settle(time.monotonic() - first)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self._generated,
                "total_tokens": self.prompt_tokens + self._generated}

    def _chunk(self, choices: list, usage: dict | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk" if self.chat
                else "text_completion", "created": self.created, "model": self.model,
                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return json.dumps(body)

    def sse(self, usage_chunk: bool):
        """The SSE payloads of a streamed answer; an iterator with close()."""
        return _Events(self._sse(usage_chunk), self._settle)

    def _sse(self, usage_chunk: bool):
        first = True
        for text in self.tokens():
            if self.chat:
                if first:
                    yield self._chunk([{"index": 0, "delta": {"role": "assistant",
                                                              "content": ""},
                                        "logprobs": None, "finish_reason": None}])
                yield self._chunk([{"index": 0, "delta": {"content": text}, "logprobs": None,
                                    "finish_reason": None}])
            else:
                yield self._chunk([{"index": 0, "text": text, "logprobs": None,
                                    "finish_reason": None}])
            first = False
        last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": self.reason} \
            if self.chat else {"index": 0, "text": "", "logprobs": None,
                               "finish_reason": self.reason}
        yield self._chunk([last])
        if usage_chunk:
            yield self._chunk([], self.usage())

    def whole(self) -> Reply:
        text = "".join(self.tokens())
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": self.reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": self.reason}
            kind = "text_completion"
        return Reply(200, {"id": self.id, "object": kind, "created": self.created,
                           "model": self.model, "choices": [choice], "usage": self.usage()})


class _Events:
    """An iterator over a generator whose close() also settles a request never started."""

    def __init__(self, generator, settle):
        self._generator = generator
        self._settle = settle
        self._started = False

    def __iter__(self):
        return self

    def __next__(self):
        self._started = True
        return next(self._generator)

    def close(self):
        self._generator.close()
        if not self._started:
            self._settle()
