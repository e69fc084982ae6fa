"""A systemd unit on a node: `systemctl show` of the properties every caller reads
(provisioning, `invoke status`, the gates, the watchdog's install), asked and parsed once:
UNIT is the kind (gather.py's `unit_section` answers, `parse_unit` reads)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.facts.queries import Fact, Query
from sparkrack.remote.gather import unit_section

# what every caller reads of a unit (provisioning, status, the gates, the watchdog's probe)
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "UnitFileState",
                   "NeedDaemonReload", "ExecMainStatus", "FragmentPath",
                   "ActiveEnterTimestampMonotonic", "ActiveEnterTimestamp", "NRestarts",
                   "MainPID")


def unit_query(name: str, systemctl: str = "systemctl") -> Query:
    """`systemctl show` of a unit (systemctl: the node's systemctl, if not on its PATH)."""
    return UNIT.query(name, ",".join(UNIT_PROPERTIES), systemctl, value=(name,))


@dataclass(frozen=True)
class UnitFacts:
    """A systemd unit as `systemctl show` reports it."""

    load: str = "not-found"
    active: str = "inactive"
    sub: str = "dead"
    result: str = ""
    enabled: str = ""
    need_reload: bool = False
    exit_status: int | None = None
    fragment: str = ""
    active_since_monotonic_us: int = 0

    @property
    def is_enabled(self) -> bool:
        return self.enabled in ("enabled", "enabled-runtime", "static", "alias", "indirect",
                                "generated")

    @property
    def succeeded(self) -> bool:
        """Active and successful (a oneshot that ran to its end this boot)."""
        return self.active == "active" and self.result == "success"


def parse_unit(lines: list[str]) -> UnitFacts:
    """One `unit_section`'s lines: `systemctl show -p ...`."""
    kv = dict(line.split("=", 1) for line in lines if "=" in line)
    status = kv.get("ExecMainStatus", "")
    since = kv.get("ActiveEnterTimestampMonotonic", "")
    return UnitFacts(
        load=kv.get("LoadState", "not-found") or "not-found",
        active=kv.get("ActiveState", "inactive"), sub=kv.get("SubState", "dead"),
        result=kv.get("Result", ""), enabled=kv.get("UnitFileState", ""),
        need_reload=kv.get("NeedDaemonReload") == "yes",
        exit_status=int(status) if status.lstrip("-").isdigit() else None,
        fragment=kv.get("FragmentPath", ""),
        active_since_monotonic_us=int(since) if since.isdigit() else 0)


UNIT = Fact(unit_section, parse_unit)
