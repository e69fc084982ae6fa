"""The fleet file: several racks' inventories behind one SMG router, its host, port and
policy, the drain budget and the soak. Its schema is here and only here (`load_fleet`:
every mistake one line at file:line with the fix); docs/fleet.md#the-fleet-file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkrack.engines.datafile import Section, is_name, is_number, read_section
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.inventory.model import resolve_path
from sparkrack.inventory.values import is_address

TOP_KEYS = ("name", "racks", "router", "drain_budget_s", "soak_s", "max_error_rate")
ROUTER_KEYS = ("host", "port", "metrics_port", "policy", "version", "ssh_user", "ssh_port",
               "ssh_key", "known_hosts", "health_check_interval_s", "connect_timeout_s")
# SMG's --policy choices that route one request to one worker over HTTP (smg 1.13.0
# `smg launch --help`); the prefill/decode ones are for disaggregated serving
POLICIES = ("round_robin", "random", "cache_aware", "power_of_two", "least_load",
            "consistent_hashing", "prefix_hash")
SMG_VERSION = "1.13.0"  # the release `fleet.router.install` installs unless the file says
MAX_DRAIN_S = 1800  # SMG's --request-timeout-secs default: the router gives a request up
MAX_SOAK_S = 3600
# SMG's own connect timeout to a worker is 10 s (HttpPoolConfig, worker/http_client.rs): a
# request it sends to a head that lost power waits that long before SMG retries it on
# another rack, past many clients' own timeouts. A head on the router's network answers a
# connect in well under a second; the fleet's default leaves room for one lost SYN (resent
# after 1 s).
CONNECT_TIMEOUT_S = 2


@dataclass(frozen=True)
class RouterSpec:
    """Where and how the fleet's router runs."""

    host: str  # address of the router's host (SSH, and the fleet's endpoint)
    port: int  # the fleet's OpenAI-compatible endpoint and SMG's /workers API
    metrics_port: int  # SMG's Prometheus /metrics
    policy: str
    version: str
    ssh_user: str
    ssh_port: int
    ssh_key: Path | None
    known_hosts: Path | None
    health_check_interval_s: int  # SMG probes each worker's health path this often
    connect_timeout_s: int = CONNECT_TIMEOUT_S  # SMG's connect to a head, then its retry

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class Fleet:
    """A checked fleet file."""

    file: Path
    name: str
    racks: tuple[Path, ...]  # each rack's inventory folder
    router: RouterSpec
    drain_budget_s: int  # a rack's drain through the router, until its in-flight count is 0
    soak_s: int  # after a rack is registered again, the router's error rate is watched
    max_error_rate: float  # failed / all requests through the router during a soak

    def inventories(self) -> list[Inventory]:
        """Each rack's inventory, loaded (InventoryError at its own file:line)."""
        return [load_inventory(path) for path in self.racks]


def load_fleet(file: str | Path) -> Fleet:
    """The fleet file at file, checked whole; InventoryError at file:line otherwise (the one
    place that knows its keys: `invoke validate` calls it too)."""
    file = Path(file)
    top = read_section(file, TOP_KEYS, docs="docs/fleet.md#the-fleet-file")
    racks = _racks(top, file.parent)
    router = _router(top.section("router", ROUTER_KEYS), file.parent)
    fleet = Fleet(
        file=file, name=top.value("name", is_name, "a name: letters, digits, . _ -"),
        racks=racks, router=router,
        drain_budget_s=top.value("drain_budget_s", lambda v: _int_in(v, 0, MAX_DRAIN_S),
                                 f"whole seconds, 0-{MAX_DRAIN_S}", default=120),
        soak_s=top.value("soak_s", lambda v: _int_in(v, 0, MAX_SOAK_S),
                         f"whole seconds, 0-{MAX_SOAK_S}", default=30),
        max_error_rate=float(top.value("max_error_rate", lambda v: is_number(v) and v <= 1,
                                       "a fraction, 0-1", default=0.0)))
    return fleet


def _racks(top: Section, here: Path) -> tuple[Path, ...]:
    value = top.value("racks", lambda v: isinstance(v, list) and len(v) >= 2 and all(
        isinstance(item, str) and item.strip() for item in v),
        "a list of two or more inventory folders")
    folders = tuple(resolve_path(here, item) for item in value)
    seen: set[Path] = set()
    for folder in folders:
        if not (folder / "hosts.yml").is_file():
            raise top.error("racks", f"racks: {folder} is not an inventory folder (no "
                            "hosts.yml)", fix="name each rack's inventory folder, relative "
                            "to the fleet file")
        if folder.resolve() in seen:
            raise top.error("racks", f"racks: {folder} is named twice",
                            fix="name each rack once")
        seen.add(folder.resolve())
    return folders


def _router(section: Section, here: Path) -> RouterSpec:
    port = "a TCP port, 1-65535"
    key = section.value("ssh_key", _is_path_text, "a file path", default=None)
    known = section.value("known_hosts", _is_path_text, "a file path", default=None)
    spec = RouterSpec(
        host=section.value("host", lambda v: isinstance(v, str) and is_address(v),
                           "an IP address or host name"),
        port=section.value("port", lambda v: _int_in(v, 1, 65535), port, default=30080),
        metrics_port=section.value("metrics_port", lambda v: _int_in(v, 1, 65535), port,
                                   default=29000),
        policy=section.value("policy", lambda v: v in POLICIES, "one of: " +
                             ", ".join(POLICIES), default="round_robin"),
        version=section.value("version", lambda v: isinstance(v, str) and is_name(v),
                              "an smg release such as 1.13.0", default=SMG_VERSION),
        ssh_user=section.value("ssh_user", is_name, "a user name", default="root"),
        ssh_port=section.value("ssh_port", lambda v: _int_in(v, 1, 65535), port,
                               default=22),
        ssh_key=None if key is None else resolve_path(here, key),
        known_hosts=None if known is None else resolve_path(here, known),
        health_check_interval_s=section.value(
            "health_check_interval_s", lambda v: _int_in(v, 1, 60),
            "whole seconds, 1-60 (SMG's default 60)", default=5),
        connect_timeout_s=section.value(
            "connect_timeout_s", lambda v: _int_in(v, 1, 10),
            "whole seconds, 1-10 (SMG's own default 10)", default=CONNECT_TIMEOUT_S))
    if spec.port == spec.metrics_port:
        raise section.error("metrics_port", f"metrics_port {spec.port} is the router's port "
                            "too", fix="give the metrics their own port, e.g. 29000")
    return spec


def _int_in(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_path_text(value) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value
