"""Rank 0's HTTP API as each engine serves it: health, models, info, /metrics, and the
OpenAI-compatible completions, refused as the engines refuse them (completion.py answers)."""

from __future__ import annotations

import time
from typing import Protocol

from .cli import EngineArgs
from .completion import Completion
from .config import RankConfig
from .log import Log
from .metrics import Metrics
from .record import VERSIONS
from .server import Reply, Stream, error_body
from .text import count_tokens, message_text, passphrase


class RankZero(Protocol):
    """What the routes read and ask of rank 0 (head.py's Head, which hands itself to Api:
    the API never imports the head)."""

    args: EngineArgs
    settings: RankConfig
    log: Log
    model_info: dict
    metrics: Metrics
    ready: bool
    draining: bool

    @property
    def refusing(self) -> bool: ...

    def serving(self, timeout: float) -> bool: ...

    def requests(self) -> tuple[int, int]: ...

    def accept(self) -> bool: ...


class Api:
    """The routes of rank 0's HTTP server (server.py speaks the HTTP)."""

    def __init__(self, head: RankZero):
        self.head = head
        self.args = head.args
        self.settings = head.settings

    def routes(self) -> dict:
        table = {("GET", "/health"): self.health, ("GET", "/v1/models"): self.models,
                 ("POST", "/v1/chat/completions"): self.chat,
                 ("POST", "/v1/completions"): self.completions}
        if self.args.engine == "vllm" or self.args.namespace.get("enable_metrics"):
            table[("GET", "/metrics")] = self.prometheus  # SGLang: only with --enable-metrics
        if self.args.engine == "sglang":
            table.update({("GET", "/health_generate"): self.health,
                          ("GET", "/model_info"): self.info_model,
                          ("GET", "/get_model_info"): self.info_model,
                          ("GET", "/server_info"): self.info_server,
                          ("GET", "/get_server_info"): self.info_server})
        else:
            table.update({("GET", "/version"): lambda body: Reply(
                200, {"version": VERSIONS["vllm"]}), ("GET", "/ping"): self.health})
        return table

    def health(self, body) -> Reply:
        head = self.head
        if not head.ready or (head.draining and self.args.engine == "sglang"):
            return Reply(503)  # vLLM's /health says 503 only once its engine is dead
        if self.args.engine == "sglang" and not head.serving(self.settings.health_timeout_s):
            return Reply(503)  # a 1-token generation through every rank did not complete
        return Reply(200)

    def models(self, body) -> Reply:
        card = {"id": self.args.served_model_name, "object": "model",
                "created": int(time.time()), "owned_by": self.args.engine,
                "root": self.args.model_path, "parent": None,
                "max_model_len": self.args.context_length}
        return Reply(200, {"object": "list", "data": [card]})

    def info_model(self, body) -> Reply:
        model_info = self.head.model_info
        return Reply(200, {"model_path": self.args.model_path,
                           "tokenizer_path": self.args.namespace.get("tokenizer_path")
                           or self.args.model_path, "is_generation": True,
                           "preferred_sampling_params": None, "weight_version": "default",
                           "has_image_understanding": False,
                           "has_audio_understanding": False,
                           "model_type": model_info.get("model_type"),
                           "architectures": model_info.get("architectures")})

    def info_server(self, body) -> Reply:
        return Reply(200, {**{k: v for k, v in self.args.namespace.items()},
                           "version": VERSIONS["sglang"],
                           "internal_states": [{
                               "avg_spec_accept_length": self.settings.accept_length,
                               "last_gen_throughput": self.head.metrics.counts["last_tps"]}]})

    def prometheus(self, body) -> Reply:
        running, waiting = self.head.requests()
        text = self.head.metrics.text(self.args.served_model_name, running, waiting,
                                      self.settings.accept_length, self.args.speculative_steps)
        return Reply(200, text, "text/plain; version=0.0.4; charset=utf-8")

    def chat(self, body: dict) -> Reply | Stream:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) for m in messages):
            return Reply(400, error_body("'messages' must be a non-empty list of objects"))
        text = " ".join(message_text(m.get("content")) for m in messages)
        return self._generate(body, count_tokens(text), chat=True, text=text)

    def completions(self, body: dict) -> Reply | Stream:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            tokens = len(prompt)  # token ids
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            tokens = count_tokens(prompt[0])
        elif isinstance(prompt, str):
            tokens = count_tokens(prompt)
        else:
            return Reply(400, error_body("'prompt' must be a string or a list of token ids"))
        text = prompt if isinstance(prompt, str) else prompt[0] if isinstance(
            prompt[0], str) else None
        return self._generate(body, tokens, chat=False, text=text)

    @property
    def context_window(self) -> int | None:
        """The context in tokens: the flag's, else the model's max_position_embeddings."""
        fallback = self.head.model_info.get("max_position_embeddings")
        return self.args.context_length or (fallback if isinstance(fallback, int) else None)

    def recall(self, text: str | None, prompt_tokens: int) -> list[str] | None:
        """The answer's words when text is the bench's needle prompt: the passphrase when the
        prompt is within reach (recall_tokens, else the context), else None (filler)."""
        found = passphrase(text)
        if found is None:
            return None
        reach = self.settings.recall_tokens or self.context_window
        if reach is not None and prompt_tokens > reach:
            self.head.log(f"needle prompt of {prompt_tokens} tokens is beyond the {reach} "
                          "tokens this stub recalls: answering filler")
            return None
        return [found]

    def _generate(self, body: dict, prompt_tokens: int, chat: bool,
                  text: str | None = None) -> Reply | Stream:
        args = self.args
        if not self.head.ready or self.head.refusing:
            return Reply(503, error_body("The server is not ready or is shutting down",
                                         "ServiceUnavailableError", 503))
        model = body.get("model")
        if args.engine == "vllm" and model not in (None, args.served_model_name):
            return Reply(404, error_body(f"The model `{model}` does not exist.",
                                         "NotFoundError", 404))
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            return Reply(400, error_body("max_tokens must be a non-negative integer"))
        window = self.context_window
        if window and prompt_tokens + (limit or 0) > window:
            return Reply(400, error_body(
                f"This model's maximum context length is {window} tokens. "
                f"However, you requested {prompt_tokens + (limit or 0)} tokens "
                f"({prompt_tokens} in the messages, {limit or 0} in the completion). Please "
                "reduce the length of the messages or completion."))
        answer = self.recall(text, prompt_tokens)
        natural = self.settings.answer_tokens if answer is None else len(answer)
        if limit is not None and (body.get("ignore_eos") or limit <= natural):
            count, reason = limit, "length"
        else:
            count, reason = natural, "stop"
        if not self.head.accept():
            return Reply(503, error_body("The server is shutting down",
                                         "ServiceUnavailableError", 503))
        stream = bool(body.get("stream"))
        usage_chunk = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        request = Completion(self.head, chat, prompt_tokens, count, reason,
                             model or args.served_model_name, answer)
        if stream:
            return Stream(request.sse(usage_chunk))
        return request.whole()
