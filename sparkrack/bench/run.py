"""One bench run, the field report's method, against rank 0 of the running deployment:
warm-up, single prompts, concurrent users, needle, accept length, in a quick or full suite
(docs/engines.md#comparing-lanes-invoke-bench).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sparkrack.bench import prompts, speculative
from sparkrack.bench.measure import aggregate_rate
from sparkrack.bench.result import (
    BenchResult,
    NeedleResult,
    PromptResult,
    Run,
    UserRun,
    UsersResult,
)
from sparkrack.bench.target import Target, stamp
from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.deployments.headapi import (
    Cancel,
    Cancelled,
    Endpoint,
    HeadError,
    Streamed,
)


class BenchError(SparkrackError):
    """The bench cannot measure what it was asked to (the message says why)."""


@dataclass(frozen=True)
class Suite:
    name: str
    repeats: int  # rounds of the three single-request prompts
    max_tokens: int  # decoded tokens per request (ignore_eos)
    users: int  # concurrent users
    needle_by_default: bool  # run the needle at DEFAULT_NEEDLE_CONTEXT without --context


SUITES = {
    "quick": Suite("quick", repeats=1, max_tokens=128, users=4, needle_by_default=False),
    "full": Suite("full", repeats=3, max_tokens=512, users=4, needle_by_default=True),
}
DEFAULT_NEEDLE_CONTEXT = 131072
NEEDLE_MAX_TOKENS = 128  # room for a short answer (and a reasoning preamble)
NEEDLE_DEPTH = 0.5
MIN_NEEDLE_CONTEXT = 2048
WARMUP_TOKENS = 16
CALIBRATION_WORDS = (512, 1024)
READ_TIMEOUT = 120.0  # longest silence within one answer
PROGRESS_EVERY = 0.25


def needle_context(suite: Suite, context: int | None, served: int | None) -> int | None:
    """The needle's context length: --context (0 = none), else the full suite's default
    when the deployment serves that much. UsageError when --context does not fit."""
    if context is not None:
        if context == 0:
            return None
        if context < MIN_NEEDLE_CONTEXT:
            raise UsageError(f"--context {context} is too small for a haystack",
                             fix=f"at least {MIN_NEEDLE_CONTEXT}, or 0 for no needle")
        if served is not None and context > served:
            raise UsageError(f"--context {context} exceeds the deployment's context length "
                             f"{served}", fix=f"at most --context {served}")
        return context
    if suite.needle_by_default and (served is None or served >= DEFAULT_NEEDLE_CONTEXT):
        return DEFAULT_NEEDLE_CONTEXT
    return None


def needle_timeout(context: int) -> float:
    """Longest wait for the first token of a `context`-token prompt (the field report's
    754K needle took 691 s: allow ~1 ms per token plus a margin)."""
    return max(READ_TIMEOUT, 120.0 + context / 1000.0)


class Bench:
    """One run. `run()` always returns the result; `error` holds what stopped it early
    (KeyboardInterrupt: None, result.partial set)."""

    def __init__(self, target: Target, endpoint: Endpoint, suite: Suite, *,
                 name: str | None = None, context: int | None = None,
                 max_tokens: int | None = None, repeats: int | None = None,
                 on_progress: Callable[[str, float], None] = lambda text, elapsed: None,
                 on_event: Callable[[str], None] = lambda line: None):
        if max_tokens is not None and max_tokens < 2:
            raise UsageError("--tokens must be at least 2 (decode speed needs two tokens)")
        self.target = target
        self.endpoint = endpoint
        self.suite = suite
        self.max_tokens = max_tokens or suite.max_tokens
        self.repeats = repeats or suite.repeats
        self.context = needle_context(suite, context, target.context_length)
        self.on_progress = on_progress
        self.on_event = on_event
        self.cancel = Cancel()
        self.error: SparkrackError | None = None
        self._began = time.monotonic()
        self._last_progress = 0.0
        now = time.time()
        lane = f"{target.deployment.engine}-{target.deployment.profile}"
        self.result = BenchResult(
            name=name or f"{lane}-{suite.name}-{stamp(now)}",
            suite=suite.name,
            date=datetime.fromtimestamp(now, UTC).astimezone().isoformat(timespec="seconds"),
            started=now, deployment=target.as_dict(),
            settings={"max_tokens": self.max_tokens, "repeats": self.repeats,
                      "users": suite.users, "context": self.context, "ignore_eos": True,
                      "temperature": 0.0, "warmup_tokens": WARMUP_TOKENS,
                      "needle_max_tokens": NEEDLE_MAX_TOKENS, "needle_depth": NEEDLE_DEPTH})
        if target.record_note:
            self.result.notes.append(target.record_note)

    # --- the run ---------------------------------------------------------------------------

    def run(self) -> BenchResult:
        section = "warm-up"
        try:
            self._stream("warm-up", [_user(prompts.load_prompt("code"))], WARMUP_TOKENS)
            engine, series = self.target.deployment.engine, self.target.metrics
            before = speculative.snapshot(self.endpoint, engine, series)
            section = "single"
            self._single()
            section = "users"
            self._users()
            if self.context:
                section = "needle"
                self._needle()
            section = "accept length"
            after = speculative.snapshot(self.endpoint, engine, series)
            self.result.accept_length, self.result.accept_source = speculative.accept_length(before, after)
        except (KeyboardInterrupt, Cancelled):
            self.cancel.stop()
            self._stopped(section, "stopped by Ctrl-C")
        except SparkrackError as exc:
            self.cancel.stop()
            self.error = exc
            self._stopped(section, f"stopped by an error: {exc.line()}")
        self.result.seconds = round(time.monotonic() - self._began, 3)
        return self.result

    def _stopped(self, section: str, why: str) -> None:
        self.result.partial = True
        self.result.stopped_in = section
        self.result.notes.append(f"partial: {why} during {section}")

    # --- sections --------------------------------------------------------------------------

    def _single(self) -> None:
        texts = prompts.prompts()
        by_name = {name: PromptResult(name) for name in texts}
        self.result.single = list(by_name.values())
        total = self.repeats * len(texts)
        done = 0
        for round_ in range(self.repeats):
            for name, text in texts.items():
                done += 1
                what = f"single {done}/{total}: {name}"
                streamed = self._stream(what, [_user(text)], self.max_tokens)
                run = Run.of(streamed)
                by_name[name].runs.append(run)
                self._check_length(name, run)
                self.on_event(f"{name} {round_ + 1}/{self.repeats}: "
                              f"{_fmt(run.decode_tok_s)} tok/s decode, TTFT {_fmt(run.ttft_s, 3)} s, "
                              f"{run.completion_tokens} tokens")

    def _users(self) -> None:
        count = self.suite.users
        texts = prompts.prompts()
        names = list(texts)
        users = UsersResult(count)
        self.result.users = users
        lock = threading.Lock()
        barrier = threading.Barrier(count)
        outcomes: dict[int, Streamed | BaseException] = {}
        counts = [0] * count

        def user(index: int) -> None:
            name = names[index % len(names)]

            def piece(streamed: Streamed) -> None:
                counts[index] = len(streamed.times)
            try:
                barrier.wait(timeout=30)
                streamed = self.endpoint.stream_chat(
                    [_user(texts[name])], self.max_tokens, timeout=READ_TIMEOUT,
                    cancel=self.cancel, on_piece=piece)
                with lock:
                    outcomes[index] = streamed
                    users.per_user.append(UserRun(**vars(Run.of(streamed)), user=index + 1,
                                                  prompt=name))
                    users.per_user.sort(key=lambda u: u.user)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                with lock:
                    outcomes[index] = exc

        threads = [threading.Thread(target=user, args=(i,), name=f"bench-user-{i + 1}", daemon=True)
                   for i in range(count)]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    thread.join(0.1)
                self._progress(f"{count} users: " + " ".join(f"{n}" for n in counts) + " pieces")
        except BaseException:
            self.cancel.stop()
            barrier.abort()
            for thread in threads:
                thread.join(5)
            raise
        errors = [o for o in outcomes.values() if isinstance(o, BaseException)]
        if errors:
            first = errors[0]
            if isinstance(first, (Cancelled, KeyboardInterrupt)):
                raise Cancelled()
            if isinstance(first, SparkrackError):
                raise first
            raise BenchError(f"a user's request failed: {first}")
        streams = [o for o in outcomes.values() if isinstance(o, Streamed)]
        began = min(s.sent for s in streams)
        ended = max(s.last for s in streams if s.last is not None)
        users.aggregate_tok_s = aggregate_rate(sum(s.completion_tokens or 0 for s in streams),
                                               began, ended)
        users.wall_s = ended - began
        per_user = ", ".join(_fmt(u.decode_tok_s) for u in users.per_user)
        self.on_event(f"{count} users: {_fmt(users.aggregate_tok_s)} tok/s aggregate; per user "
                      f"{per_user} tok/s")

    def _needle(self) -> None:
        context = self.context
        secret = prompts.passphrase(f"{self.result.name}:{context}")
        words = self._haystack_words(context, secret)
        self.on_event(f"needle: {words} filler words for a {context}-token prompt")
        for attempt in range(2):
            text = prompts.haystack(words, secret, NEEDLE_DEPTH)
            try:
                streamed = self._stream(f"needle at {context} tokens", [_user(text)],
                                        NEEDLE_MAX_TOKENS, ignore_eos=False,
                                        timeout=needle_timeout(context))
                break
            except HeadError as exc:
                if attempt or "context length" not in str(exc).lower():
                    raise
                words = int(words * 0.97)  # the estimate overshot the window: 3 % fewer
        ttft = streamed.ttft
        prompt_tokens = streamed.prompt_tokens
        found = prompts.found(streamed.text, secret)
        self.result.needle = NeedleResult(
            context=context, prompt_tokens=prompt_tokens, found=found, prefill_s=ttft,
            prefill_tok_s=(prompt_tokens / ttft) if prompt_tokens and ttft else None,
            depth=NEEDLE_DEPTH, answer=streamed.text.strip()[:200])
        self.on_event(f"needle at {context}: {'pass' if found else 'FAIL'}, prefill "
                      f"{_fmt(ttft, 2)} s for {prompt_tokens} tokens")

    def _haystack_words(self, context: int, secret: str) -> int:
        """Filler words for a prompt of about `context` tokens minus the answer's room,
        from the server's own counts of two sizes of the same haystack."""
        counts = []
        for words in CALIBRATION_WORDS:
            self._progress(f"needle: counting tokens ({words} words)")
            body = self.endpoint.chat([_user(prompts.haystack(words, secret, NEEDLE_DEPTH))], 1,
                                      cancel=self.cancel)
            tokens = (body.get("usage") or {}).get("prompt_tokens")
            if not isinstance(tokens, int):
                raise BenchError("rank 0 answered without usage.prompt_tokens: cannot size "
                                 "the haystack")
            counts.append(tokens)
        (w1, w2), (t1, t2) = CALIBRATION_WORDS, counts
        per_word = (t2 - t1) / (w2 - w1)
        if per_word <= 0:
            raise BenchError(f"the server's token counts do not grow with the prompt ({t1}, {t2})")
        overhead = t1 - w1 * per_word
        room = NEEDLE_MAX_TOKENS + max(16, int(context * 0.002))
        return max(0, int((context - room - overhead) / per_word))

    # --- helpers ---------------------------------------------------------------------------

    def _stream(self, what: str, messages: list[dict], max_tokens: int, *,
                ignore_eos: bool = True, timeout: float = READ_TIMEOUT) -> Streamed:
        self._progress(f"{what}: waiting for the first token")

        def piece(streamed: Streamed) -> None:
            self._progress(f"{what}: {len(streamed.times)} pieces received")
        return self.endpoint.stream_chat(messages, max_tokens, ignore_eos=ignore_eos,
                                         timeout=timeout, cancel=self.cancel, on_piece=piece)

    def _progress(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY:
            self._last_progress = now
            self.on_progress(text, now - self._began)

    def _check_length(self, name: str, run: Run) -> None:
        if run.completion_tokens is not None and run.completion_tokens < self.max_tokens:
            note = (f"{name}: the engine stopped at {run.completion_tokens} of {self.max_tokens} "
                    f"tokens ({run.finish_reason}); ignore_eos not honoured?")
            if note not in self.result.notes:
                self.result.notes.append(note)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
