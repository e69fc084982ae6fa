"""The bench's pure parts: decode-rate arithmetic, medians, ties and deltas of compare,
result JSON round-trip, SSE and Prometheus parsing, prompts and the haystack."""

import json
from pathlib import Path

import pytest

from sparkrack.bench import measure, prompts, speculative
from sparkrack.bench.compare import compare, header
from sparkrack.bench.result import (
    BenchResult,
    NeedleResult,
    PromptResult,
    Run,
    UserRun,
    UsersResult,
    rows,
    show,
)
from sparkrack.bench.run import (
    DEFAULT_NEEDLE_CONTEXT,
    SUITES,
    needle_context,
    needle_timeout,
)
from sparkrack.bench.target import argv_port
from sparkrack.core.errors import UsageError
from sparkrack.deployments.headapi import (
    DONE,
    Streamed,
    finish_reason,
    parse_sse_line,
    piece_text,
)
from sparkrack.engines.serving import engine_serving

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"
SERIES = engine_serving(REHEARSAL, "sglang").metrics  # what the fake endpoint serves

# --- decode rate ------------------------------------------------------------------------------

def test_decode_rate_counts_tokens_after_the_first_over_first_to_last():
    # 41 tokens, the first at t=1.0, the last at t=2.0: 40 tokens in 1 s after the first
    assert measure.decode_rate(1.0, 2.0, 41) == pytest.approx(40.0)


@pytest.mark.parametrize("first,last,tokens", [(None, 1.0, 10), (1.0, None, 10), (1.0, 2.0, 1),
                                                (1.0, 2.0, 0), (1.0, 2.0, None), (2.0, 2.0, 10)])
def test_decode_rate_is_none_when_it_cannot_be_measured(first, last, tokens):
    assert measure.decode_rate(first, last, tokens) is None


def test_streamed_ttft_and_decode_from_usage():
    s = Streamed(sent=100.0, times=[100.5 + i * 0.05 for i in range(21)],
                 usage={"prompt_tokens": 30, "completion_tokens": 21})
    assert s.ttft == pytest.approx(0.5)
    assert Run.of(s).decode_tok_s == pytest.approx(20.0)
    # speculative decoding: 11 pieces carrying the same 21 tokens over the same second -> the
    # server's count, not the pieces'
    drafts = Streamed(sent=100.0, times=s.times[::2], usage=s.usage)
    assert Run.of(drafts).decode_tok_s == pytest.approx(20.0)
    assert Run.of(Streamed(sent=0.0, times=[1.0, 2.0])).decode_tok_s is None  # no usage: not guessed


def test_median_ignores_unmeasured_and_handles_even_counts():
    assert measure.median([39.0, 41.0, 40.0]) == 40.0
    assert measure.median([None, 30.0, 32.0]) == 31.0
    assert measure.median([None, None]) is None
    assert measure.median([]) is None


def test_aggregate_rate_is_all_tokens_over_wall_time():
    assert measure.aggregate_rate(4 * 64, 0.0, 3.2) == pytest.approx(80.0)
    assert measure.aggregate_rate(0, 0.0, 3.2) is None
    assert measure.aggregate_rate(10, 2.0, 2.0) is None


# --- ties and deltas --------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,tie", [(40.0, 41.2, True), (40.0, 38.8, True), (40.0, 41.3, False),
                                     (40.0, 30.0, False), (0.0, 0.0, True), (0.0, 1.0, False),
                                     (None, 1.0, False), (100.0, 103.0, True), (100.0, 97.0, True)])
def test_tie_within_three_percent_of_the_baseline(a, b, tie):
    assert measure.is_tie(a, b) is tie


def test_delta_pct_relative_to_a():
    assert measure.delta_pct(40.0, 30.0) == pytest.approx(-25.0)
    assert measure.delta_pct(30.0, 40.0) == pytest.approx(33.333, abs=1e-3)
    assert measure.delta_pct(None, 3.0) is None


def _result(name, engine, rates, ttft=0.1, users=(), needle=None, accept=None, partial=False):
    single = [PromptResult(p, [Run(r, ttft, 64, 100, 1.7, "length") for r in runs])
              for p, runs in zip(prompts.PROMPT_NAMES, rates, strict=False)]
    u = None
    if users:
        u = UsersResult(len(users), [UserRun(r, 0.2, 64, 100, 2.0, "length", user=i + 1,
                                             prompt=prompts.PROMPT_NAMES[i % 3])
                                     for i, r in enumerate(users)], sum(users) * 0.9, 2.0)
    return BenchResult(name=name, suite="full", date="2026-11-30T11:20:03+00:00", started=1.0,
                       deployment={"engine": engine, "profile": "512k", "deployment_id": "d-" + name,
                                   "image_id": "sha256:abc", "spec_hash": "f" * 64},
                       settings={"max_tokens": 64}, single=single, users=u, needle=needle,
                       accept_length=accept, accept_source="test" if accept else None,
                       partial=partial)


def test_compare_gives_every_row_a_delta_and_marks_ties():
    a = _result("vllm", "vllm", [[30.0] * 3, [30.0] * 3, [30.0] * 3], users=[30.0] * 4,
                accept=2.89, needle=NeedleResult(8192, 8000, True, 2.0, 4000.0, 0.5, "x"))
    b = _result("sglang", "sglang", [[40.0] * 3, [30.5] * 3, [29.5] * 3], users=[40.0] * 4,
                accept=2.83, needle=NeedleResult(8192, 8000, True, 2.1, 3809.0, 0.5, "x"))
    table = {r.key: r for r in compare(a, b)}
    assert list(table)[:3] == ["decode.code", "decode.prose", "decode.explanation"]
    code = table["decode.code"]
    assert code.delta == pytest.approx(10.0) and code.pct == pytest.approx(33.33, abs=0.01)
    assert code.verdict == "sglang"  # higher is better: B ahead
    assert table["decode.prose"].verdict == "tie"  # +1.7 %
    assert table["decode.explanation"].verdict == "tie"  # -1.7 %
    assert table["ttft.code"].verdict == "tie"
    assert table["users.aggregate"].verdict == "sglang"
    assert [table[f"users.{i}"].verdict for i in range(1, 5)] == ["sglang"] * 4
    assert table["needle.found"].verdict == "tie"
    assert table["needle.prefill_s"].verdict == "vllm"  # +5 % prefill time: lower is better
    assert table["accept_length"].verdict == "tie"  # 2.83 vs 2.89 is -2.1 %
    for row in table.values():
        cells = row.cells()
        assert len(cells) == 5
        if isinstance(row.a, float) and isinstance(row.b, float):
            assert cells[3] != "-" and "%" in cells[3]


def test_compare_rows_only_in_one_run_and_pass_fail():
    a = _result("a", "vllm", [[30.0]] * 3, needle=NeedleResult(8192, 8000, False, 2.0, 4000.0, 0.5))
    b = _result("b", "sglang", [[30.0]] * 3, users=[30.0] * 4,
                needle=NeedleResult(8192, 8000, True, 2.0, 4000.0, 0.5))
    table = {r.key: r for r in compare(a, b)}
    assert table["needle.found"].verdict == "b"
    assert table["users.aggregate"].verdict == "only in b"
    assert table["accept_length"].verdict == "-"  # neither exposed it
    same = {r.key: r for r in compare(a, a)}
    assert same["decode.code"].verdict == "tie"
    assert [line[0] for line in header(a, b)] == ["engine", "profile", "deployment_id",
                                                   "image_id", "spec_hash", "date", "suite"]


def test_lower_is_better_for_ttft():
    a = _result("a", "vllm", [[30.0]] * 3, ttft=0.10)
    b = _result("b", "vllm", [[30.0]] * 3, ttft=0.20)
    assert {r.key: r for r in compare(a, b)}["ttft.code"].verdict == "a"


# --- result JSON ------------------------------------------------------------------------------

def test_result_json_round_trip():
    r = _result("run-1", "sglang", [[40.0, 39.9, 40.1]] * 3, users=[40.0, 39.0, 41.0, 40.0],
                needle=NeedleResult(8192, 7990, False, 2.0, 3995.0, 0.5, "nothing"), accept=2.83,
                partial=True)
    r.stopped_in = "needle"
    r.notes.append("partial: stopped by Ctrl-C during needle")
    text = r.to_json()
    data = json.loads(text)
    assert data["format"] == 1 and data["partial"] is True
    assert data["single"][0]["median_decode_tok_s"] == 40.0
    back = BenchResult.from_json(text)
    assert back.as_dict() == r.as_dict()
    assert rows(back) == rows(r)


def test_result_from_another_format_is_refused():
    with pytest.raises(ValueError):
        BenchResult.from_dict({"format": 99})


def test_rows_show_every_measure_and_partial_title():
    r = _result("x", "vllm", [[30.0, 31.0, 29.0]] * 3, users=[30.0] * 4, partial=True)
    labels = [row.label for row in rows(r)]
    assert labels[:6] == ["decode code", "decode prose", "decode explanation",
                          "TTFT code", "TTFT prose", "TTFT explanation"]
    assert "4 users: user 4" in labels and labels[-1] == "accept length"
    assert "PARTIAL" in r.title()
    assert show(None) == "-" and show(True) == "pass" and show(40.0, "tok/s") == "40.00 tok/s"


# --- SSE, metrics, prompts --------------------------------------------------------------------

def test_sse_parsing():
    assert parse_sse_line(b"data: [DONE]\n") is DONE
    assert parse_sse_line(b"\n") is None and parse_sse_line(b": keep-alive") is None
    chunk = parse_sse_line(b'data: {"choices":[{"delta":{"content":" hi"},"finish_reason":null}]}')
    assert piece_text(chunk) == " hi"
    assert piece_text({"choices": [{"delta": {"reasoning_content": "hmm"}}]}) == "hmm"
    assert piece_text({"choices": [{"text": "x", "finish_reason": "length"}]}) == "x"
    assert finish_reason({"choices": [{"delta": {}, "finish_reason": "length"}]}) == "length"
    assert piece_text({"choices": [], "usage": {"completion_tokens": 3}}) == ""


def test_prometheus_and_accept_length():
    text = ('# TYPE vllm:spec_decode_num_drafts_total counter\n'
            'vllm:spec_decode_num_drafts_total{model_name="GLM-5.3"} 100\n'
            'vllm:spec_decode_num_accepted_tokens_total{model_name="GLM-5.3"} 189\n'
            'vllm:request_success_total{finished_reason="stop",model_name="m"} 2\n'
            'vllm:request_success_total{finished_reason="length",model_name="m"} 3\n')
    values = speculative.parse_prometheus(text)
    assert values["vllm:request_success_total"] == 5
    assert (values["vllm:spec_decode_num_drafts_total"],
            values["vllm:spec_decode_num_accepted_tokens_total"]) == (100, 189)
    assert speculative.parse_prometheus("<html>502 Bad Gateway</html>\n") == {}
    before = speculative.SpecSnapshot("vllm", drafts=100, accepted=189, source="s")
    after = speculative.SpecSnapshot("vllm", drafts=200, accepted=378, source="s")
    assert speculative.accept_length(before, after)[0] == pytest.approx(2.89)
    assert speculative.accept_length(after, after) == (None, None)  # nothing drafted
    sglang = speculative.SpecSnapshot("sglang", accept_length=2.83, source="g")
    assert speculative.accept_length(speculative.SpecSnapshot("sglang"), sglang) == (2.83, "g")
    assert speculative.server_info_accept_length(
        {"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert speculative.server_info_accept_length({}) is None


def test_prompts_ship_with_the_package():
    texts = prompts.prompts()
    assert list(texts) == ["code", "prose", "explanation"]
    assert all(len(t.split()) > 50 for t in texts.values())
    assert len(prompts.filler_words()) > 500


def test_haystack_holds_the_needle_at_depth():
    secret = prompts.passphrase("seed")
    assert secret == prompts.passphrase("seed")
    text = prompts.haystack(2000, secret, 0.5)
    body, question = text.rsplit("\n\n", 1)
    assert question == prompts.NEEDLE_QUESTION
    assert body.count(secret) == 1
    where = body.split().index(secret + ".") / len(body.split())
    assert 0.45 < where < 0.55
    assert len(body.split()) == 2000 + len(prompts.needle_sentence(secret).split())
    assert prompts.found(f"The passphrase is {secret.upper()}.", secret)
    assert not prompts.found("I do not know.", secret)


def test_needle_context_choice():
    full, quick = SUITES["full"], SUITES["quick"]
    assert needle_context(full, None, 524288) == DEFAULT_NEEDLE_CONTEXT
    assert needle_context(full, None, 65536) is None
    assert needle_context(quick, None, 524288) is None
    assert needle_context(quick, 8192, 524288) == 8192
    assert needle_context(full, 0, 524288) is None
    with pytest.raises(UsageError):
        needle_context(full, 600000, 524288)
    with pytest.raises(UsageError):
        needle_context(full, 100, 524288)
    assert needle_timeout(754000) > 691


def test_argv_port():
    assert argv_port(["python3", "-m", "x", "--host", "0.0.0.0", "--port", "30000"]) == 30000
    assert argv_port(["vllm", "serve", "--port=8000"]) == 8000
    assert argv_port(["vllm", "serve"]) is None


# --- a run against a fake endpoint (no network) -----------------------------------------------

class FakeEndpoint:
    """Answers like a server decoding at `rate` tok/s; counts 1.3 tokens per word + 20."""

    def __init__(self, rate=40.0, interrupt_at=None, fail_at=None, retrieves=True):
        self.rate, self.interrupt_at, self.fail_at, self.retrieves = rate, interrupt_at, fail_at, retrieves
        self.calls = 0
        self.prompt_sizes = []

    @staticmethod
    def tokens(messages):
        return int(len(messages[0]["content"].split()) * 1.3) + 20

    def stream_chat(self, messages, max_tokens, *, ignore_eos=True, timeout=0, cancel=None,
                    on_piece=None):
        from sparkrack.deployments.headapi import HeadError

        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        if self.calls == self.fail_at:
            raise HeadError("rank 0 at spark-01:30000 answered HTTP 503: shutting down")
        prompt = self.tokens(messages)
        self.prompt_sizes.append(prompt)
        count = max_tokens if ignore_eos else min(max_tokens, 10)
        times = [100.2 + i / self.rate for i in range(count)]
        s = Streamed(sent=100.0, times=times, ended=times[-1] + 0.001,
                     usage={"prompt_tokens": prompt, "completion_tokens": count})
        text = messages[0]["content"]
        if "secret passphrase" in text and self.retrieves:
            s.text = text.split("secret passphrase of the rack is ")[1].split(".")[0]
        if on_piece:
            on_piece(s)
        return s

    def chat(self, messages, max_tokens, *, timeout=0, cancel=None):
        return {"usage": {"prompt_tokens": self.tokens(messages), "completion_tokens": 1}}

    def get(self, path, timeout=5.0):
        if path == "/metrics":
            return 200, b'sglang:spec_accept_length{model_name="m"} 2.83\n'
        return 404, b""

    def get_json(self, path, timeout=5.0):
        return None


def _target(context=524288):
    from sparkrack.bench.target import Target
    from sparkrack.deployments.record import Deployment
    deployment = Deployment(engine="sglang", profile="512k", deployment_id="d1",
                            spec_hash="f" * 64, image="img", image_id="sha256:abc")
    return Target(deployment, node="spark-01", address="10.77.1.11", port=30000,
                  model="GLM-5.3", context_length=context, metrics=SERIES)


def test_a_full_run_measures_every_section():
    from sparkrack.bench.run import NEEDLE_MAX_TOKENS, Bench

    endpoint = FakeEndpoint(rate=40.0)
    bench = Bench(_target(), endpoint, SUITES["full"], name="t", context=8192, max_tokens=64)
    result = bench.run()
    assert bench.error is None and not result.partial
    assert [p.median_decode_tok_s for p in result.single] == [pytest.approx(40.0)] * 3
    assert [len(p.runs) for p in result.single] == [3, 3, 3]
    assert len(result.users.per_user) == 4 and result.users.aggregate_tok_s > 0
    needle = result.needle
    assert needle.found and needle.context == 8192
    assert 8192 - NEEDLE_MAX_TOKENS - 40 <= needle.prompt_tokens <= 8192 - NEEDLE_MAX_TOKENS
    assert result.accept_length == 2.83 and "spec_accept_length" in result.accept_source
    assert result.settings["max_tokens"] == 64 and result.settings["context"] == 8192


def test_ctrl_c_keeps_what_was_measured():
    from sparkrack.bench.run import Bench

    # call 1 is the warm-up, 2 code, 3 prose: Ctrl-C there
    bench = Bench(_target(), FakeEndpoint(interrupt_at=3), SUITES["full"], name="t", max_tokens=64)
    result = bench.run()
    assert bench.error is None and result.partial and result.stopped_in == "single"
    assert [len(p.runs) for p in result.single] == [1, 0, 0]
    assert result.users is None and result.needle is None and result.accept_length is None
    assert result.notes[-1] == "partial: stopped by Ctrl-C during single"
    assert BenchResult.from_json(result.to_json()).partial


def test_an_error_midway_is_kept_with_the_partial_result():
    from sparkrack.bench.run import Bench

    bench = Bench(_target(), FakeEndpoint(fail_at=5), SUITES["quick"], name="t")
    result = bench.run()
    assert result.partial and result.stopped_in == "users"
    assert "HTTP 503" in bench.error.line()
    assert [len(p.runs) for p in result.single] == [1, 1, 1]


def test_quick_suite_has_no_needle_unless_asked():
    from sparkrack.bench.run import Bench

    bench = Bench(_target(), FakeEndpoint(retrieves=False), SUITES["quick"], name="t")
    result = bench.run()
    assert result.needle is None and result.settings["max_tokens"] == 128
    assert [len(p.runs) for p in result.single] == [1, 1, 1]
    failed = Bench(_target(), FakeEndpoint(retrieves=False), SUITES["quick"], name="t",
                   context=4096).run()
    assert failed.needle is not None and failed.needle.found is False
