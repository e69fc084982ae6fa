"""The stub deployment's settings: `{model_path}/sparkrack-stub.json` (stdlib only), every key
optional, an unknown one an error; the format and its precedence:
docs/formats.md#stub-settings.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass

CONFIG_NAME = "sparkrack-stub.json"

DEFAULTS = {
    "load_delay_s": 3.0,
    "compile_s": None,
    "tokens_per_s": 50.0,
    "prefill_tokens_per_s": 4000.0,
    "answer_tokens": 64,
    "accept_length": None,
    "rank_mem_gib": None,
    "indexer_scale": 1.0,
    "health_timeout_s": 20.0,
    "recall_tokens": None,
    "gated_repo": None,
    "drain_poll_s": 5.0,
}
RANK_KEYS = {"load_delay_s": (int, float), "exit_at_start": (bool,),
             "die_after_s": (int, float), "exit_code": (int,), "wedge_at_request": (int,),
             "wedge_above_tokens": (int,)}
_NUMBERS = (int, float)
_TYPES = {"load_delay_s": _NUMBERS, "compile_s": _NUMBERS + (type(None),),
          "tokens_per_s": _NUMBERS, "prefill_tokens_per_s": _NUMBERS,
          "answer_tokens": (int,), "accept_length": _NUMBERS + (type(None),),
          "rank_mem_gib": _NUMBERS + (type(None),), "indexer_scale": _NUMBERS,
          "health_timeout_s": _NUMBERS, "recall_tokens": (int, type(None)),
          "gated_repo": (str, type(None)), "drain_poll_s": _NUMBERS}
ENGINES = ("sglang", "vllm")
# Per-token draft acceptance that gives the field report's accept length 2.83 at 3 EAGLE
# steps: 1 + p + p^2 + p^3 = 2.83 for p = 0.772 (vLLM MTP 3 measured 2.89: close).
ACCEPT_RATE = 0.772


class StubConfigError(ValueError):
    """sparkrack-stub.json is not valid; the message names the key."""


@dataclass(frozen=True)
class RankConfig:
    """What one rank of one engine does, all settings resolved."""

    load_delay_s: float
    compile_s: float  # a cold start's compile (compilecache.py)
    tokens_per_s: float
    prefill_tokens_per_s: float
    answer_tokens: int
    accept_length: float
    rank_mem_gib: float | None
    indexer_scale: float
    health_timeout_s: float
    exit_at_start: bool = False
    die_after_s: float | None = None
    exit_code: int = 1
    recall_tokens: int | None = None  # None: the whole context
    wedge_at_request: int | None = None  # this rank wedges on its Nth forward
    wedge_above_tokens: int | None = None  # ... or on a forward with a longer prompt
    gated_repo: str | None = None  # the lane fetches from this gated Hub repo: needs a token
    drain_poll_s: float = 5.0  # SGLang's drain looks this often whether requests are left


def accept_length(steps: int, rate: float = ACCEPT_RATE) -> float:
    """Expected tokens per verify step with `steps` draft tokens: sum of rate**j, j=0..steps."""
    return sum(rate ** j for j in range(steps + 1))


def check(data: object, where: str = CONFIG_NAME) -> dict:
    """data if it is a valid stub config, else StubConfigError naming the bad key."""
    if not isinstance(data, dict):
        raise StubConfigError(f"{where}: must be a JSON object")
    _check_settings(data, where, top=True)
    for engine, settings in data.get("engines", {}).items():
        if engine not in ENGINES:
            raise StubConfigError(f"{where}: engines.{engine}: unknown engine "
                                  f"(known: {', '.join(ENGINES)})")
        _check_settings({k: v for k, v in settings.items() if k != "versions"}
                        if isinstance(settings, dict) else settings, f"{where}: engines.{engine}")
        versions = settings.get("versions", {})
        if not isinstance(versions, dict):
            raise StubConfigError(f"{where}: engines.{engine}.versions must be an object "
                                  "keyed by version")
        for version, per_version in versions.items():
            _check_settings(per_version, f"{where}: engines.{engine}.versions.{version}")
    for index, entry in enumerate(data.get("overrides", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("when"), dict):
            raise StubConfigError(f"{where}: overrides[{index}] needs a 'when' object")
        for flag, value in entry["when"].items():
            if not flag.startswith("-") or not isinstance(value, (str, int, float, bool)):
                raise StubConfigError(f"{where}: overrides[{index}].when: {flag!r} must map "
                                      "a --flag to its value (true: a bare switch)")
        _check_settings({k: v for k, v in entry.items() if k != "when"},
                        f"{where}: overrides[{index}]")
    return data


def _check_settings(data: object, where: str, top: bool = False) -> None:
    if not isinstance(data, dict):
        raise StubConfigError(f"{where}: must be a JSON object")
    allowed = set(_TYPES) | {"ranks"} | ({"engines", "overrides"} if top else set())
    for key, value in data.items():
        if key not in allowed:
            raise StubConfigError(f"{where}: unknown key {key!r} (known: "
                                  f"{', '.join(sorted(allowed))})")
        if key in _TYPES and (not isinstance(value, _TYPES[key]) or isinstance(value, bool)):
            kind = "a repo id (org/name) or null" if str in _TYPES[key] else "a number"
            raise StubConfigError(f"{where}: {key} must be {kind}, got {value!r}")
        if key in _TYPES and isinstance(value, _NUMBERS) and value < 0:
            raise StubConfigError(f"{where}: {key} must be >= 0, got {value!r}")
    if top and not isinstance(data.get("engines", {}), dict):
        raise StubConfigError(f"{where}: engines must be an object")
    if top and not isinstance(data.get("overrides", []), list):
        raise StubConfigError(f"{where}: overrides must be a list")
    ranks = data.get("ranks", {})
    if not isinstance(ranks, dict):
        raise StubConfigError(f"{where}: ranks must be an object keyed by rank number")
    for rank, settings in ranks.items():
        if not str(rank).isdigit() or not isinstance(settings, dict):
            raise StubConfigError(f"{where}: ranks.{rank}: keys are rank numbers ('3'), "
                                  "values objects")
        for key, value in settings.items():
            if key not in RANK_KEYS:
                raise StubConfigError(f"{where}: ranks.{rank}: unknown key {key!r} (known: "
                                      f"{', '.join(sorted(RANK_KEYS))})")
            if not isinstance(value, RANK_KEYS[key]) or (
                    isinstance(value, bool) and bool not in RANK_KEYS[key]):
                raise StubConfigError(f"{where}: ranks.{rank}.{key}: bad value {value!r}")


def _matches(when: dict, argv: list[str]) -> bool:
    """Whether every `--flag: value` of when is in argv (value true: the bare switch)."""
    for flag, value in when.items():
        if value is True:
            if flag not in argv:
                return False
            continue
        pairs = set(itertools.pairwise(argv))
        pairs |= {tuple(w.split("=", 1)) for w in argv if w.startswith("--") and "=" in w}
        if (flag, str(value)) not in pairs:
            return False
    return True


def resolve(data: dict, engine: str, rank: int, argv: list[str],
            speculative_steps: int, version: str = "") -> RankConfig:
    """The settings of one rank of one engine version from a checked config (data may be
    {})."""
    own = data.get("engines", {}).get(engine, {})
    layers = [DEFAULTS, data, own, own.get("versions", {}).get(version, {})]
    layers += [entry for entry in data.get("overrides", []) if _matches(entry["when"], argv)]
    merged: dict = {}
    ranks: dict = {}
    for layer in layers:
        merged.update({k: v for k, v in layer.items()
                       if k not in ("ranks", "engines", "overrides", "when", "versions")})
        for key, settings in layer.get("ranks", {}).items():
            ranks.setdefault(str(int(key)), {}).update(settings)
    mine = ranks.get(str(rank), {})
    if merged["accept_length"] is None:
        merged["accept_length"] = round(accept_length(speculative_steps), 2)
    load_delay = float(mine.get("load_delay_s", merged["load_delay_s"]))
    return RankConfig(
        load_delay_s=load_delay,
        compile_s=load_delay if merged["compile_s"] is None else float(merged["compile_s"]),
        tokens_per_s=float(merged["tokens_per_s"]),
        prefill_tokens_per_s=float(merged["prefill_tokens_per_s"]),
        answer_tokens=int(merged["answer_tokens"]),
        accept_length=float(merged["accept_length"]),
        rank_mem_gib=None if merged["rank_mem_gib"] is None else float(merged["rank_mem_gib"]),
        indexer_scale=float(merged["indexer_scale"]),
        health_timeout_s=float(merged["health_timeout_s"]),
        exit_at_start=bool(mine.get("exit_at_start", False)),
        die_after_s=None if mine.get("die_after_s") is None else float(mine["die_after_s"]),
        exit_code=int(mine.get("exit_code", 1)),
        recall_tokens=merged["recall_tokens"],
        wedge_at_request=mine.get("wedge_at_request"),
        wedge_above_tokens=mine.get("wedge_above_tokens"), gated_repo=merged["gated_repo"],
        drain_poll_s=float(merged["drain_poll_s"]))


def load(model_path: str) -> dict:
    """The checked config of the model directory ({} when it has no sparkrack-stub.json)."""
    path = os.path.join(model_path, CONFIG_NAME)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise StubConfigError(f"{path}: {error}") from None
    return check(data, path)
