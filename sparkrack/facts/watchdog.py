"""The watchdog service's node as `watch.install / uninstall / status` see it: the node's
Python, what is installed (lib's manifest and its check, the inventory copy's hashes, the
key, the unit file, the state file), the unit's state, and the address the node reaches
each node from. WATCHDOG is the kind: `probe_query` asks it, sparkrack/remote/watchdog.py's
`watchdog_section` answers, `parse_state` reads the answer into `NodeState`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError
from sparkrack.facts.platform import Platform
from sparkrack.facts.queries import Fact, Query, answer
from sparkrack.facts.systemd import UNIT_PROPERTIES
from sparkrack.remote.watchdog import watchdog_section


def probe_query(*, python: str, install_dir: str, key_path: str, unit_path: str,
                state_dir: str, state_file: str, systemctl: str, unit: str,
                peers: Iterable[tuple[str, int]]) -> Query:
    """Everything about the watchdog on its node; python runs it there, systemctl is asked
    about unit; peers: (address, port) of every node."""
    pairs = [(str(address), str(port)) for address, port in peers]
    value = (python, install_dir, key_path, unit_path, state_dir, state_file, systemctl, unit)
    return WATCHDOG.query(*value, ",".join(UNIT_PROPERTIES), pairs,
                          value=(*value, *(v for pair in pairs for v in pair)))


@dataclass(frozen=True)
class NodeState:
    """What the probe found on the watchdog's node."""

    platform: Platform | None = None
    platform_error: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)  # peer address -> source
    install_dir: bool = False
    install_dir_kind: str = "absent"  # remote/watchdog.py install_dir_kind
    lib: bool = False
    state_dir: bool = False
    manifest_sha256: str = ""  # of lib/.sparkrack-manifest
    lib_checks: bool = False  # every file Python runs matched that manifest, none is missing
    lib_differs: tuple[str, ...] = ()  # the first files that did not (manifest-differs)
    lib_edited: tuple[str, ...] = ()  # data files changed on the node, kept (manifest-edited)
    files: Mapping[str, str] = field(default_factory=dict)  # inventory/..., README.md -> sha256
    private_key: bool = False
    public_key: str = ""
    unit_file: bytes | None = None
    state: bytes | None = None  # the service's state.json
    unit: Mapping[str, str] = field(default_factory=dict)  # systemctl show properties

    @property
    def active(self) -> bool:
        return self.unit.get("ActiveState") in ("active", "activating", "reloading")

    @property
    def enabled(self) -> bool:
        return self.unit.get("UnitFileState") in ("enabled", "enabled-runtime")

    @property
    def installed(self) -> bool:
        """Anything of the watchdog on the node."""
        return bool(self.install_dir or self.unit_file is not None or self.state is not None
                    or self.state_dir or self.active or self.enabled)


def _b64(text: str | None) -> bytes | None:
    return base64.b64decode(text) if text else None


def _platform(python: str, lines: list[str], rc: str) -> tuple[Platform | None, str]:
    """The interpreter's Platform, or why there is none."""
    output = [line for line in lines if line.strip()]
    if rc != "0":
        return None, (f"{python} did not run (exit {rc}): "
                      f"{(output[-1] if output else '')[:160]}")
    try:
        return Platform.parse("\n".join(output)), ""
    except (ValueError, KeyError, IndexError):
        return None, f"{python} printed {(' '.join(output))[:120]!r}"


def _names(text: str | None) -> tuple[str, ...]:
    try:
        names = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(str(n) for n in names) if isinstance(names, list) else ()


def parse_state(lines: list[str], python: str) -> NodeState:
    """One `watchdog_section`'s lines, python the interpreter it ran (SparkrackError when
    they are cut short)."""
    if not lines or lines[-1] != "end":
        raise SparkrackError("the watchdog probe's output is cut short",
                             fix="run the command again")
    printed: list[str] = []
    values: dict[str, str] = {}
    exists, files, unit = set(), {}, {}
    for line in lines:
        key, _, rest = line.partition(" ")
        if key == "platform":
            printed.append(rest)
        elif key == "exists":
            exists.add(rest)
        elif key == "file":
            digest, _, path = rest.partition(" ")
            files[json.loads(path)] = digest
        elif key == "unit" and "=" in rest:
            unit.update([rest.split("=", 1)])
        else:
            values[key] = rest
    platform, error = _platform(python, printed, values.get("platform-rc", "1"))
    try:
        sources = json.loads(values.get("sources") or "{}")
    except ValueError:
        sources = {}
    public = _b64(values.get("public-key"))
    return NodeState(
        lib_differs=_names(values.get("manifest-differs")),
        lib_edited=_names(values.get("manifest-edited")),
        platform=platform, platform_error=error,
        sources=sources if isinstance(sources, dict) else {},
        install_dir="install-dir" in exists, lib="lib" in exists, state_dir="state-dir" in exists,
        install_dir_kind=values.get("install-dir-kind", "absent"),
        manifest_sha256=values.get("manifest", ""), lib_checks=values.get("manifest-check") == "0",
        files=files, private_key="private-key" in values,
        public_key=public.decode(errors="replace").strip() if public else "",
        unit_file=_b64(values.get("unit-file")), state=_b64(values.get("state")), unit=unit)


class _Probe(Fact):
    """The watchdog's kind: its parser also names the interpreter the query ran."""

    def read(self, lines: list[str], query: Query) -> NodeState:
        return self.parse(lines, query.value[0])


WATCHDOG = _Probe(watchdog_section, parse_state)


def parse_probe(text: str, query: Query) -> NodeState:
    """The node script's output for query alone -> NodeState."""
    return answer(text, [query]).get(query)
