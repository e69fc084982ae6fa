"""A bench result: what was measured, as JSON (format 1: docs/formats.md#bench-results) and
as the rows the tables and compare show.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkrack.bench.measure import decode_rate, median

FORMAT = 1


@dataclass
class Run:
    """One measured request."""

    decode_tok_s: float | None
    ttft_s: float | None
    completion_tokens: int | None
    prompt_tokens: int | None
    seconds: float | None
    finish_reason: str | None = None

    @classmethod
    def of(cls, streamed) -> Run:
        seconds = None if streamed.ended is None else streamed.ended - streamed.sent
        return cls(decode_tok_s=decode_rate(streamed.first, streamed.last,
                                            streamed.completion_tokens), ttft_s=streamed.ttft,
                   completion_tokens=streamed.completion_tokens,
                   prompt_tokens=streamed.prompt_tokens, seconds=seconds,
                   finish_reason=streamed.finish_reason)


@dataclass
class PromptResult:
    """The runs of one single-request prompt."""

    prompt: str
    runs: list[Run] = field(default_factory=list)

    @property
    def median_decode_tok_s(self) -> float | None:
        return median(r.decode_tok_s for r in self.runs)

    @property
    def median_ttft_s(self) -> float | None:
        return median(r.ttft_s for r in self.runs)

    def as_dict(self) -> dict:
        return {"prompt": self.prompt, "runs": [asdict(r) for r in self.runs],
                "median_decode_tok_s": self.median_decode_tok_s,
                "median_ttft_s": self.median_ttft_s}


@dataclass
class UserRun(Run):
    user: int = 0
    prompt: str = ""


@dataclass
class UsersResult:
    count: int
    per_user: list[UserRun] = field(default_factory=list)
    aggregate_tok_s: float | None = None
    wall_s: float | None = None

    def as_dict(self) -> dict:
        return {"count": self.count, "per_user": [asdict(u) for u in self.per_user],
                "aggregate_tok_s": self.aggregate_tok_s, "wall_s": self.wall_s}


@dataclass
class NeedleResult:
    context: int
    prompt_tokens: int | None
    found: bool
    prefill_s: float | None  # = time to first token of the haystack prompt
    prefill_tok_s: float | None
    depth: float
    answer: str = ""


@dataclass
class BenchResult:
    """Everything one `invoke bench` measured."""

    name: str
    suite: str
    date: str
    started: float
    deployment: dict
    settings: dict
    single: list[PromptResult] = field(default_factory=list)
    users: UsersResult | None = None
    needle: NeedleResult | None = None
    accept_length: float | None = None
    accept_source: str | None = None
    partial: bool = False
    stopped_in: str | None = None  # the section Ctrl-C (or an error) stopped
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"format": FORMAT, "name": self.name, "suite": self.suite, "date": self.date,
                "started": self.started, "seconds": self.seconds, "partial": self.partial,
                "stopped_in": self.stopped_in, "deployment": self.deployment,
                "settings": self.settings, "single": [p.as_dict() for p in self.single],
                "users": self.users.as_dict() if self.users else None,
                "needle": asdict(self.needle) if self.needle else None,
                "accept_length": self.accept_length, "accept_source": self.accept_source,
                "notes": list(self.notes)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> BenchResult:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a sparkrack bench result of format {FORMAT}")
        users = data.get("users")
        needle = data.get("needle")
        return cls(
            name=data["name"], suite=data["suite"], date=data["date"], started=data["started"],
            deployment=dict(data.get("deployment") or {}), settings=dict(data.get("settings") or {}),
            single=[PromptResult(p["prompt"], [Run(**r) for r in p.get("runs", [])])
                    for p in data.get("single") or []],
            users=UsersResult(users["count"], [UserRun(**u) for u in users.get("per_user", [])],
                              users.get("aggregate_tok_s"), users.get("wall_s")) if users else None,
            needle=NeedleResult(**needle) if needle else None,
            accept_length=data.get("accept_length"), accept_source=data.get("accept_source"),
            partial=bool(data.get("partial")), stopped_in=data.get("stopped_in"),
            seconds=data.get("seconds"), notes=list(data.get("notes") or []))

    @classmethod
    def from_json(cls, text: str) -> BenchResult:
        return cls.from_dict(json.loads(text))

    def title(self) -> str:
        d = self.deployment
        flag = " PARTIAL" if self.partial else ""
        return (f"bench {self.name}{flag}: {d.get('engine')} {d.get('profile')}, suite "
                f"{self.suite}, {self.date}")


@dataclass(frozen=True)
class Row:
    """One measure of a result, as the table and compare show it."""

    key: str
    label: str
    value: Any  # float, bool (pass/fail), str, or None (not measured)
    unit: str = ""
    better: str = "higher"  # higher | lower | pass | info
    detail: str = ""


NOT_MEASURED = "not measured (the run stopped early)"


def rows(result: BenchResult) -> list[Row]:
    """The measures in a fixed order: decode per prompt, TTFT per prompt, four users
    (aggregate, each user), needle, accept length."""
    out: list[Row] = []
    for p in result.single:
        runs = " / ".join(_num(r.decode_tok_s) for r in p.runs)
        tokens = sorted({r.completion_tokens for r in p.runs if r.completion_tokens})
        out.append(Row(f"decode.{p.prompt}", f"decode {p.prompt}", p.median_decode_tok_s,
                       "tok/s", "higher", f"median of {len(p.runs)}: {runs}; "
                       f"{'/'.join(map(str, tokens)) or '?'} tokens" if p.runs else NOT_MEASURED))
    for p in result.single:
        runs = " / ".join(_num(r.ttft_s, 3) for r in p.runs)
        prompt_tokens = next((r.prompt_tokens for r in p.runs if r.prompt_tokens), None)
        out.append(Row(f"ttft.{p.prompt}", f"TTFT {p.prompt}", p.median_ttft_s, "s", "lower",
                       f"median of {len(p.runs)}: {runs}; {prompt_tokens or '?'} prompt tokens"
                       if p.runs else NOT_MEASURED))
    users = result.users
    if users is not None:
        out.append(Row("users.aggregate", f"{users.count} users aggregate", users.aggregate_tok_s,
                       "tok/s", "higher", f"{sum(u.completion_tokens or 0 for u in users.per_user)}"
                       f" tokens in {_num(users.wall_s, 2)} s, {len(users.per_user)} of "
                       f"{users.count} users finished"))
        for u in users.per_user:
            out.append(Row(f"users.{u.user}", f"{users.count} users: user {u.user}",
                           u.decode_tok_s, "tok/s", "higher",
                           f"{u.prompt}, TTFT {_num(u.ttft_s, 3)} s, "
                           f"{u.completion_tokens or '?'} tokens"))
    needle = result.needle
    if needle is not None:
        out.append(Row("needle.found", f"needle at {needle.context}", needle.found, "",
                       "pass", f"{needle.prompt_tokens or '?'} prompt tokens, depth "
                       f"{needle.depth:.0%}; answer {needle.answer[:40]!r}"))
        out.append(Row("needle.prefill_s", f"needle prefill at {needle.context}", needle.prefill_s,
                       "s", "lower", f"{_num(needle.prefill_tok_s, 0)} prompt tok/s"))
    if result.accept_source or not result.partial:
        why = result.accept_source or "not exposed by the engine"
    else:
        why = NOT_MEASURED
    out.append(Row("accept_length", "accept length", result.accept_length, "", "higher", why))
    return out


def show(value: Any, unit: str = "") -> str:
    """A value as the tables print it."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "pass" if value else "fail"
    if isinstance(value, float):
        text = _num(value, 3 if unit == "s" else 2)
        return f"{text} {unit}".strip()
    return f"{value} {unit}".strip()


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
