"""Rank 0's request counters, KV-cache gauges and latency histograms, and its /metrics text
under each engine's names (sglang:*, vllm:*; the histograms: latency.py)."""

from __future__ import annotations

import threading
import time

from .latency import Latency

DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: its gauges every 40 steps


class Metrics:
    """What rank 0 counts of its requests (vLLM counts tokens every engine step; SGLang
    when a request finishes, and sets its gauges at each prefill batch and every
    DECODE_LOG_INTERVAL decode steps, a token each here)."""

    def __init__(self, engine: str, kv_pool_tokens: int = 131072):
        self.engine = engine
        self.kv_pool_tokens = max(1, kv_pool_tokens)
        self.kv_tokens = 0  # the running requests' tokens in the KV cache
        self.kv_logged = 0  # ... as SGLang's gauge last showed them
        self._decoded = 0
        self._decode_log = time.monotonic()
        self._lock = threading.Lock()
        self.counts = {"prompt_tokens": 0, "generation_tokens": 0, "requests": 0,
                       "finished_stop": 0, "finished_length": 0, "last_tps": 0.0,
                       "finished_prompt_tokens": 0, "finished_generation_tokens": 0}
        self.latency = Latency(engine)  # TTFT and inter-token latency histograms

    def finished(self, prompt_tokens: int, generated: int, reason: str, seconds: float) -> None:
        """A request finished (reason: stop or length) after seconds of generation."""
        with self._lock:
            self.counts["requests"] += 1
            self.counts["finished_" + reason] += 1
            self.counts["finished_prompt_tokens"] += prompt_tokens
            self.counts["finished_generation_tokens"] += generated
            self.kv_tokens = max(0, self.kv_tokens - generated)  # its tokens freed with it
            if seconds > 0 and generated > 1:
                self.counts["last_tps"] = round((generated - 1) / seconds, 2)

    def cached(self, tokens: int) -> None:
        """tokens more (fewer, when negative) in the KV cache: a prefill chunk done, a
        request's tokens freed. Both engines set their gauge at every step: vLLM's
        kv_cache_usage_perc from the scheduler's stats (sent even when no request produced
        output), SGLang's num_used_tokens at each prefill batch, so a chunked prefill moves
        it chunk by chunk."""
        with self._lock:
            self.kv_tokens = max(0, self.kv_tokens + tokens)
            self.kv_logged = self.kv_tokens

    def prefilled(self, seconds: float) -> None:
        """A request's prefill took seconds (vLLM's request_prefill_time_seconds)."""
        with self._lock:
            self.latency.prefilled(seconds)

    def prompt(self, tokens: int) -> None:
        with self._lock:
            self.counts["prompt_tokens"] += tokens

    def token(self, seconds: float, first: bool) -> None:
        """One token, seconds after its request arrived (first) or after its last token."""
        with self._lock:
            self.counts["generation_tokens"] += 1
            self.kv_tokens += 1
            self.latency.token(seconds, first)
            self._decoded += 1
            if self._decoded % DECODE_LOG_INTERVAL == 0:  # SGLang's decode log
                now = time.monotonic()
                self.kv_logged = self.kv_tokens
                self.counts["last_tps"] = round(DECODE_LOG_INTERVAL / max(
                    1e-6, now - self._decode_log), 2)
                self._decode_log = now

    def text(self, name: str, running: int, waiting: int, accept: float,
             speculative_steps: int) -> str:
        """The Prometheus text of /metrics for served model name, with the requests running
        and waiting now and the speculative accept length."""
        m = self.counts
        label = f'{{model_name="{name}"}}'
        if self.engine == "sglang":
            rows = [("spec_accept_length", "gauge", "Average speculative accept length.", accept),
                    ("num_running_reqs", "gauge", "Running requests.", running),
                    ("num_used_tokens", "gauge", "The number of used tokens.",
                     self.kv_logged),
                    ("token_usage", "gauge", "The token usage.",
                     round(self.kv_logged / self.kv_pool_tokens, 2)),
                    ("num_queue_reqs", "gauge", "Queued requests.", waiting),
                    ("gen_throughput", "gauge", "Generation throughput (token/s).", m["last_tps"]),
                    ("prompt_tokens_total", "counter", "Prefill tokens.",
                     m["finished_prompt_tokens"]),
                    ("generation_tokens_total", "counter", "Generated tokens.",
                     m["finished_generation_tokens"]),
                    ("num_requests_total", "counter", "Finished requests.", m["requests"])]
            lines = []
            for metric, kind, text, value in rows:
                lines += [f"# HELP sglang:{metric} {text}", f"# TYPE sglang:{metric} {kind}",
                          f"sglang:{metric}{label} {value}"]
        else:
            generated = m["generation_tokens"]
            drafts = round(generated / accept) if accept else 0
            steps = speculative_steps
            rows = [("num_requests_running", "gauge", running),
                    ("num_requests_waiting", "gauge", waiting),
                    ("kv_cache_usage_perc", "gauge", self.kv_tokens / self.kv_pool_tokens),
                    ("prompt_tokens_total", "counter", m["prompt_tokens"]),
                    ("generation_tokens_total", "counter", generated),
                    ("spec_decode_num_drafts_total", "counter", drafts if steps else 0),
                    ("spec_decode_num_draft_tokens_total", "counter",
                     drafts * steps if steps else 0),
                    ("spec_decode_num_accepted_tokens_total", "counter",
                     generated - drafts if steps else 0)]
            lines = []
            for metric, kind, value in rows:
                lines += [f"# TYPE vllm:{metric} {kind}", f"vllm:{metric}{label} {value}"]
            for reason in ("stop", "length"):
                lines.append(f'vllm:request_success_total{{finished_reason="{reason}",'
                             f'model_name="{name}"}} {m["finished_" + reason]}')
        with self._lock:
            lines += self.latency.lines(name)
        return "\n".join(lines) + "\n"
