"""What sparkrack reads of a running engine (the memory gate, the start, the stall watch,
bench, export): the `serving` section of its profile file, every key checked
(docs/engines.md#what-sparkrack-reads-of-a-running-engine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrack.engines.catalog import engine_file
from sparkrack.engines.datafile import Section, read_section
from sparkrack.engines.option_names import OptionSet
from sparkrack.inventory.ranges import RANGES

SERVING_KEYS = ("memory_fraction", "worker_health_path", "liveness_path", "metrics")
METRICS_KEYS = ("flag", "running", "waiting", "progress", "accept_length", "server_info",
                "spec_drafts", "spec_accepted", "step_time", "prefill_time", "prompt_tokens")
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_URL_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")
_METRIC = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")  # a Prometheus metric name
_PATH_HELP = "a path such as /health"


@dataclass(frozen=True)
class MemoryFraction:
    """The flag that sets the share of the GPU pool the engine takes, and its default."""

    flag: str
    default: float  # the engine's own, when a profile leaves the flag out


@dataclass(frozen=True)
class Metrics:
    """The series of rank 0's Prometheus /metrics that sparkrack reads."""

    flag: str | None  # served only with this flag in the profile (None: always)
    running: str  # gauge: requests running
    waiting: str  # gauge: requests waiting
    progress: tuple[str, ...]  # any change of one is token progress
    accept_length: str | None = None  # gauge: the speculative accept length
    server_info: tuple[str, ...] = ()  # else avg_spec_accept_length at these paths
    spec_drafts: str | None = None  # or counters: accept length = 1 + accepted / drafts
    spec_accepted: str | None = None
    step_time: str | None = None  # histogram: decode time per step (the watchdog's pace)
    prefill_time: str | None = None  # histogram: prefill seconds, of prompt_tokens' tokens
    prompt_tokens: str | None = None  # counter: prompt tokens prefilled


@dataclass(frozen=True)
class Serving:
    """An engine's serving facts, read from its profile file."""

    file: Path
    memory_fraction: MemoryFraction
    worker_health_path: str | None  # None: ranks >= 1 serve no HTTP (headless)
    liveness_path: str  # rank 0's cheap answer (an exported lane's liveness)
    metrics: Metrics


def engine_serving(inventory_dir: Path, engine: str) -> Serving:
    """The serving facts of engine's profile file for this inventory (catalog.py), read
    without the profiles; InventoryError at file:line for a bad or missing key."""
    file = engine_file(inventory_dir, engine)
    return serving_of(read_section(file, None))


def serving_of(top: Section, options: OptionSet | None = None) -> Serving:
    """The `serving` section of a profile file's top level, each key checked; its flags
    against the option table when there is one."""
    section = top.section("serving", SERVING_KEYS)
    memory = section.section("memory_fraction", ("flag", "default"))
    metrics = _metrics(section.section("metrics", METRICS_KEYS), options)
    return Serving(
        file=top.file,
        memory_fraction=MemoryFraction(
            _flag(memory, "flag", options, nullable=False),
            memory.number("default", RANGES["serving.memory_fraction.default"],
                          integer=False)),
        worker_health_path=section.value(
            "worker_health_path", lambda v: v is None or _is_path(v),
            f"{_PATH_HELP}, or null when the workers serve no HTTP"),
        liveness_path=section.value("liveness_path", _is_path, _PATH_HELP),
        metrics=metrics)


def _metrics(section: Section, options: OptionSet | None) -> Metrics:
    """The metrics mapping: the series names, the flag that serves them, and a way to the
    speculative accept length (a gauge, server info, or both counters) if any."""
    name = "a Prometheus metric name such as vllm:num_requests_running"
    optional = {key: section.value(key, lambda v: v is None or _is_metric(v), name,
                                   default=None)
                for key in ("accept_length", "spec_drafts", "spec_accepted", "step_time",
                            "prefill_time", "prompt_tokens")}
    if (optional["spec_drafts"] is None) != (optional["spec_accepted"] is None):
        have, lack = (("spec_drafts", "spec_accepted") if optional["spec_accepted"] is None
                      else ("spec_accepted", "spec_drafts"))
        raise section.error(have, f"metrics.{have} without {lack}: the accept length needs "
                            "both counters", fix=f"add {lack}: <{name}>, or remove {have}")
    return Metrics(
        flag=_flag(section, "flag", options, nullable=True),
        running=section.value("running", _is_metric, name),
        waiting=section.value("waiting", _is_metric, name),
        progress=tuple(section.value("progress", lambda v: isinstance(v, list) and bool(v)
                                     and all(map(_is_metric, v)),
                                     "a non-empty list of Prometheus metric names")),
        server_info=tuple(section.value("server_info", lambda v: isinstance(v, list) and all(
            map(_is_path, v)), "a list of paths such as /server_info", default=[])),
        **optional)


def _flag(section: Section, key: str, options: OptionSet | None, *,
          nullable: bool) -> str | None:
    """A flag such as --enable-metrics (or null when nullable), one of the options' when
    there is a table."""
    expected = "a flag such as --enable-metrics" + (", or null" if nullable else "")
    flag = section.value(key, lambda v: (nullable and v is None) or (
        isinstance(v, str) and bool(_FLAG.fullmatch(v))), expected)
    wrong = options.problem(flag) if options is not None and flag is not None else None
    if wrong:
        raise section.error(key, f"{section.label}.{key}: {wrong[0]}", fix=wrong[1])
    return flag


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(_URL_PATH.fullmatch(value))


def _is_metric(value: Any) -> bool:
    return isinstance(value, str) and bool(_METRIC.fullmatch(value))
