"""The probes of an exported lane's pods: liveness asks only what is cheap to answer and
allows what the watchdog allows, since a restart recreates the whole group
(docs/kubernetes.md#what-it-exports).
"""

from __future__ import annotations

import math
from typing import Any

from sparkrack.engines import LaunchSpec
from sparkrack.engines.serving import Serving

PERIOD_S = 10
TIMEOUT_S = 5  # an answer later than this counts as none
READY_FAILURES = 3  # rank 0 leaves its Service after this many misses in a row


def leader_probes(spec: LaunchSpec, serving: Serving) -> dict[str, Any]:
    """Startup on the health path, readiness and liveness on the cheap one (port `http`)."""
    cheap = serving.liveness_path
    return {"startupProbe": _startup(spec, _get(spec.health_path, "http")),
            "readinessProbe": _probe(_get(cheap, "http"), READY_FAILURES),
            "livenessProbe": _liveness(spec, _get(cheap, "http"))}


def worker_probes(spec: LaunchSpec, serving: Serving) -> dict[str, Any]:
    """A worker's startup and liveness on its own stand-in health path, if it serves one."""
    path = serving.worker_health_path
    if path is None:
        return {}
    check = _get(path, spec.ports["http"])
    return {"startupProbe": _startup(spec, check), "livenessProbe": _liveness(spec, check)}


def _get(path: str, port: str | int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}}


def _probe(check: dict[str, Any], failures: int) -> dict[str, Any]:
    return {**check, "periodSeconds": PERIOD_S, "timeoutSeconds": TIMEOUT_S,
            "failureThreshold": failures}


def _startup(spec: LaunchSpec, check: dict[str, Any]) -> dict[str, Any]:
    return _probe(check, math.ceil(spec.ready_timeout_s / PERIOD_S))


def _liveness(spec: LaunchSpec, check: dict[str, Any]) -> dict[str, Any]:
    return _probe(check, max(READY_FAILURES, math.ceil(spec.stall_budget_s / PERIOD_S)))
