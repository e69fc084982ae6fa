"""`invoke watch.status`: where the watchdog runs, since when, what it last decided, and
what of its copy on the node is stale against what watch.install would ship now.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkrack.facts.watchdog import NodeState
from sparkrack.inventory.watchdog_record import WatchdogKey, read_record, watchdog_node
from sparkrack.watchdog import payload
from sparkrack.watchdog.cyclebook import CycleBook
from sparkrack.watchdog.settings import (
    Settings,
    check_settings,
    listen_of,
    metrics_url,
    probe,
    with_install_dir,
)


@dataclass(frozen=True)
class WatchdogStatus:
    """Where the watchdog runs, since when, and what it last decided."""

    node: str
    address: str
    installed: bool
    active_state: str
    sub_state: str
    since: str  # systemd's ActiveEnterTimestamp, as it prints it
    restarts: int | None
    main_pid: int | None
    enabled: str
    metrics_url: str
    recorded: bool  # the key record beside the inventory names this node
    public_key: str
    verdicts: tuple[dict, ...] = ()
    budget: Mapping = field(default_factory=dict)
    stopped: Mapping = field(default_factory=dict)
    state_error: str = ""
    stale: tuple[str, ...] = ()  # what differs from what watch.install would ship now
    edited: tuple[str, ...] = ()  # lib/'s data files the node changed in place (kept)
    cycles: CycleBook = field(default_factory=CycleBook)  # its power cycles, held, pending

    @property
    def running(self) -> bool:
        return self.active_state == "active"

    def as_dict(self) -> dict:
        return {"node": self.node, "address": self.address, "installed": self.installed,
                "active_state": self.active_state, "sub_state": self.sub_state,
                "since": self.since, "restarts": self.restarts, "main_pid": self.main_pid,
                "enabled": self.enabled, "metrics_url": self.metrics_url,
                "recorded": self.recorded, "public_key": self.public_key,
                "verdicts": list(self.verdicts), "restart_budget": dict(self.budget),
                "stopped": dict(self.stopped), "state_error": self.state_error,
                "stale": list(self.stale), "edited": list(self.edited),
                "power_cycles": self.cycles.as_dict()}


def parse_state(data: bytes | None) -> tuple[tuple[dict, ...], dict, dict, str]:
    """The service's state.json (service.Watchdog._save_state): its verdicts (oldest
    first), budget and stopped groups; and what was wrong with it ('' if nothing)."""
    if data is None:
        return (), {}, {}, ""
    try:
        state = json.loads(data)
    except ValueError as error:
        return (), {}, {}, f"state file unreadable: {error}"
    if not isinstance(state, dict):
        return (), {}, {}, "state file is not a JSON object"
    verdicts = tuple(v for v in state.get("verdicts") or [] if isinstance(v, dict))
    budget = state.get("budget") if isinstance(state.get("budget"), dict) else {}
    stopped = state.get("stopped") if isinstance(state.get("stopped"), dict) else {}
    return verdicts, budget, stopped, ""


def parse_cycles(data: bytes | None) -> CycleBook:
    """The power cycles the service's state file keeps (cyclebook.py); none if unreadable."""
    try:
        state = json.loads(data) if data else {}
    except ValueError:
        return CycleBook()
    return CycleBook.from_dict(state.get("power_cycles") if isinstance(state, dict) else None)


def cycle_lines(book: CycleBook, now: float) -> list[str]:
    """The power cycles for an operator: each node's last ones, what is held back now, and
    a cycle not finished yet."""
    lines = [f"power cycle of {node}: {entry.describe(now)}"
             for node, entries in sorted(book.nodes.items()) for entry in entries[-2:]]
    lines += [f"held back since {time.strftime('%H:%M:%S', time.localtime(h.get('since', 0)))}"
              f": {h.get('reason', '')}" for _, h in sorted(book.held.items())]
    if book.pending is not None:
        lines.append(f"not finished: the power cycle of {book.pending.describe()} (the "
                     "service finishes it when it starts)")
    return lines


def stale_parts(state: NodeState, inventory_files: Mapping[str, bytes],
                manifest_sha256: str | None) -> tuple[str, ...]:
    """What the node's copy lacks against what watch.install would ship now: the inventory
    copy's files that differ or are missing or extra there, and lib/ (pure)."""
    stale = []
    if manifest_sha256 is not None and not (
            state.lib and state.lib_checks and state.manifest_sha256 == manifest_sha256):
        stale += [f"lib/{name}" for name in state.lib_differs
                  if state.manifest_sha256 == manifest_sha256] or ["lib"]
    wanted = {f"inventory/{p}": hashlib.sha256(c).hexdigest() for p, c in inventory_files.items()}
    there = {p: h for p, h in state.files.items() if p.startswith("inventory/")}
    stale += sorted(p for p in wanted.keys() | there.keys() if wanted.get(p) != there.get(p))
    return tuple(stale)


def status_of(node, inventory, state: NodeState, record: WatchdogKey | None,
              stale: tuple[str, ...] = ()) -> WatchdogStatus:
    """The status from a probe (pure)."""
    verdicts, budget, stopped, error = parse_state(state.state)
    unit = state.unit

    def number(key):
        value = unit.get(key, "")
        return int(value) if value.isdigit() else None

    since = unit.get("ActiveEnterTimestamp", "")
    return WatchdogStatus(
        node=node.name, address=node.address, installed=state.installed,
        active_state=unit.get("ActiveState", "unknown") or "unknown",
        sub_state=unit.get("SubState", ""), since=since if since not in ("", "n/a") else "",
        restarts=number("NRestarts"), main_pid=number("MainPID") or None,
        enabled=unit.get("UnitFileState", ""),
        metrics_url=metrics_url(node, inventory, listen_of(state.unit_file)),
        recorded=record is not None and record.node == node.name,
        public_key=state.public_key, verdicts=verdicts, budget=budget, stopped=stopped,
        state_error=error, stale=stale if state.installed else (),
        edited=tuple(f"lib/{name}" for name in state.lib_edited),
        cycles=parse_cycles(state.state))


def status(inventory, on: str | None = None, *, settings: Settings = Settings()) -> WatchdogStatus:
    """Probe the watchdog's node (read-only) and say how the service is."""
    from sparkrack.fleet import Fleet

    record = read_record(inventory.path)
    node = watchdog_node(inventory, on, record)
    if record is not None and record.node == node.name:
        settings = with_install_dir(settings, record.install_dir)
    check_settings(settings)
    with Fleet(inventory, [node]) as fleet:
        state = probe(fleet, node, settings, inventory)
    stale: tuple[str, ...] = ()
    if state.installed:
        manifest = payload.build_library().manifest()
        stale = stale_parts(state, payload.inventory_copy(inventory, settings.install_dir),
                            hashlib.sha256(manifest.encode()).hexdigest())
    return status_of(node, inventory, state, record, stale)
