"""The fleet's router, SMG, through its own HTTP API: its workers (`GET /workers`), a rack's
head registered (`POST /workers`) and drained (`DELETE /workers/{id}`: `Draining`, then
removed after its drain_settle_secs), and its request counters from its Prometheus
metrics (docs/fleet.md#the-router).
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.headapi import parse_prometheus
from sparkrack.fleet.netguard import check_device
from sparkrack.racks.fleetfile import RouterSpec

TIMEOUT_S = 5.0  # one request to the router's API
POLL_S = 0.5


class RouterError(SparkrackError):
    """The router did not answer, or refused (the message names the router and the call)."""


@dataclass(frozen=True)
class Worker:
    """One worker as the router sees it."""

    id: str
    url: str
    status: str  # pending | ready | not_ready | draining | failed (SMG's WorkerStatus)
    healthy: bool
    load: int  # requests the router has in flight on it
    connect_timeout_s: int | None = None  # its http_pool's, when registered with one

    @classmethod
    def of(cls, data: dict) -> Worker:
        pool = data.get("http_pool") if isinstance(data.get("http_pool"), dict) else {}
        timeout = pool.get("connect_timeout_secs")
        return cls(id=str(data.get("id", "")), url=str(data.get("url", "")),
                   status=str(data.get("status", "?")).lower(),
                   healthy=bool(data.get("is_healthy")), load=int(data.get("load") or 0),
                   connect_timeout_s=timeout if isinstance(timeout, int) else None)


@dataclass(frozen=True)
class Counts:
    """The router's request counters at one moment (its /metrics)."""

    requests: float  # chat/completions requests routed (smg_router_requests_total)
    errors: float  # requests that failed at the router (smg_router_request_errors_total)
    upstream_5xx: float  # 5xx answers from workers (smg_router_upstream_responses_total)

    def rate_since(self, before: Counts) -> tuple[float, float]:
        """(requests, failed) between before and now."""
        return (self.requests - before.requests,
                (self.errors - before.errors) + (self.upstream_5xx - before.upstream_5xx))


class Router:
    """SMG's API at the fleet file's host and port (vetted by the network guard)."""

    def __init__(self, spec: RouterSpec):
        self.spec = spec

    @property
    def where(self) -> str:
        return f"router {self.spec.host}:{self.spec.port}"

    def _call(self, method: str, path: str, body: dict | None = None, *,
              port: int | None = None) -> tuple[int, bytes]:
        port = port or self.spec.port
        address = check_device("router", self.spec.host, port)
        connection = http.client.HTTPConnection(address, port, timeout=TIMEOUT_S)
        try:
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, payload, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            return answer.status, answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise RouterError(f"{self.where}: {method} {path}: {exc or type(exc).__name__}",
                              fix="is the router running? invoke fleet.status") from None
        finally:
            connection.close()

    def _json(self, method: str, path: str, body: dict | None = None,
              ok: tuple[int, ...] = (200,)) -> dict:
        status, data = self._call(method, path, body)
        if status not in ok:
            raise RouterError(f"{self.where}: {method} {path} answered {status}: "
                              f"{data.decode(errors='replace')[:200]}")
        try:
            found = json.loads(data or b"{}")
        except ValueError:
            raise RouterError(f"{self.where}: {method} {path}: not JSON") from None
        return found if isinstance(found, dict) else {}

    def workers(self) -> list[Worker]:
        """Every worker the router knows, any status."""
        return [Worker.of(w) for w in self._json("GET", "/workers").get("workers", [])
                if isinstance(w, dict)]

    def worker(self, url: str) -> Worker | None:
        """The worker at url (a rack's head API, http://ADDRESS:PORT), if registered."""
        return next((w for w in self.workers() if w.url.rstrip("/") == url.rstrip("/")), None)

    def register(self, url: str) -> str:
        """Ask the router to add the worker at url, with the fleet file's connect timeout
        (SMG retries a request whose connect to a head timed out on another worker); its id
        (the router probes it, detects the engine and marks it ready in the background:
        wait_ready)."""
        found = self.worker(url)
        if found is not None:
            return found.id
        body = {"url": url, "http_pool": {"connect_timeout_secs": self.spec.connect_timeout_s}}
        return str(self._json("POST", "/workers", body, ok=(200, 201, 202))
                   .get("worker_id", ""))

    def wait_ready(self, url: str, timeout: float) -> Worker:
        """The worker at url once the router marks it ready; RouterError past timeout."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.worker(url)
            if found is not None and found.status == "ready" and found.healthy:
                return found
            if time.monotonic() > deadline:
                state = "not registered" if found is None else found.status
                raise RouterError(f"{self.where}: {url} not ready within {timeout:.0f} s "
                                  f"({state})")
            time.sleep(POLL_S)

    def drain(self, url: str, timeout: float = 10.0) -> Worker | None:
        """DELETE the worker at url and return once the router no longer selects it: SMG
        answers 202 and queues the removal, whose first step moves the worker to `Draining`
        (then removes it after its settle time), so this waits until the worker is no longer
        `ready`. The worker as it was, or None when it was not registered."""
        found = self.worker(url)
        if found is None:
            return None
        self._json("DELETE", f"/workers/{found.id}", ok=(200, 202, 204, 404))
        deadline = time.monotonic() + timeout
        while (now := self.worker(url)) is not None and now.status == "ready":
            if time.monotonic() > deadline:
                raise RouterError(f"{self.where}: {url} still ready {timeout:.0f} s after "
                                  "its removal was asked")
            time.sleep(0.05)
        return found

    def counts(self) -> Counts:
        """The router's request counters, from its Prometheus port."""
        status, data = self._call("GET", "/metrics", port=self.spec.metrics_port)
        if status != 200:
            raise RouterError(f"{self.where}: metrics answered {status}")
        values = parse_prometheus(data.decode(errors="replace"))
        upstream = _sum_labelled(data.decode(errors="replace"),
                                 "smg_router_upstream_responses_total", "status_code", "5")
        return Counts(values.get("smg_router_requests_total", 0.0),
                      values.get("smg_router_request_errors_total", 0.0), upstream)


def _sum_labelled(text: str, name: str, label: str, prefix: str) -> float:
    """The sum of name's samples whose label starts with prefix (e.g. 5xx status codes)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and str(sample.labels.get(label, "")).startswith(prefix):
                    total += sample.value
    except ValueError:
        return 0.0
    return total
