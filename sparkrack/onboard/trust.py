"""Step 1, trust: fetch a new node's SSH host key, show it, record it only when confirmed.

The key is read by fleet.hostkeys (key exchange only, no authentication). It is recorded
in the inventory's known_hosts (the only file the fleet trusts) when the operator confirms
the fingerprint: interactively, or with `--fingerprint SHA256:...` that must match. A key
that differs from one already recorded for the node's address, or for a node of the same
name, is refused, except the one of the node that `--replace` retires at the same address.

Pure parts (`host_id`, `decide`, `known_hosts_text`) are unit-tested; reading the key and
the known_hosts file is fleet.hostkeys'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkrack.fleet.hostkeys import HostKey, fingerprint, line_matches

NEW, KNOWN, REPLACES, CHANGED = "new", "known", "replaces", "CHANGED"


def same_fingerprint(given: str, actual: str) -> bool:
    """Whether an operator-given fingerprint names actual ('SHA256:' optional, '=' padding
    ignored; base64 is case-sensitive)."""
    text = given.strip()
    if not text.startswith("SHA256:"):
        text = "SHA256:" + text
    return text.rstrip("=") == actual


def host_id(address: str, port: int) -> str:
    """How known_hosts names a host: the address, or [address]:port off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass(frozen=True)
class Decision:
    """What step 1 makes of the fetched key."""

    state: str  # new | known | replaces | CHANGED
    message: str
    stale: tuple[str, ...] = ()  # host ids whose recorded keys the new one replaces


def decide(key: HostKey, recorded: dict[str, dict[str, HostKey]],
           own_ids: Sequence[str], replaced_ids: Sequence[str], known_hosts: Path,
           label: str) -> Decision:
    """Compare the node's key with what is recorded under its own ids (address, name) and
    under the ids of the node being replaced at the same place (replaced_ids).

    Same key everywhere it is recorded: known. Not recorded: new. A different key under
    one of its own ids: CHANGED (refused), unless that id belongs to the replaced node
    too: replaces."""
    shown = f"{key.get_name()} {fingerprint(key)}"
    stale, changed = [], []
    for ident in dict.fromkeys([*own_ids, *replaced_ids]):
        keys = recorded.get(ident)
        if not keys:
            continue
        if keys.get(key.get_name()) == key and len(keys) == 1:
            continue
        if keys.get(key.get_name()) == key:
            continue  # other key types recorded too: this one matches
        (stale if ident in replaced_ids else changed).append(ident)
    if changed:
        listing = "; ".join(
            f"{ident}: {', '.join(f'{t} {fingerprint(k)}' for t, k in recorded[ident].items())}"
            for ident in changed)
        return Decision(CHANGED, (
            f"{label}: host key CHANGED: the node offers {shown}, but {known_hosts} records "
            f"{listing}; refusing (if the node was reinstalled or swapped for new "
            "hardware: delete its line there, then onboard again)"))
    if stale:
        return Decision(REPLACES, f"{label}: {shown} replaces the key recorded for "
                        f"{', '.join(stale)} (the node being replaced)", tuple(stale))
    if any(recorded.get(ident) for ident in (*own_ids, *replaced_ids)):
        return Decision(KNOWN, f"{label}: {shown} already recorded in {known_hosts}")
    return Decision(NEW, f"{label}: {shown} (not recorded yet)")


def known_hosts_text(old_text: str, ident: str, key: HostKey,
                     stale: Sequence[str] = ()) -> str:
    """known_hosts content with key recorded for ident and the lines of stale ids (and any
    previous line of ident) removed; every other line kept as it was."""
    drop = set(stale) | {ident}
    kept = [line for line in old_text.splitlines(keepends=True)
            if not any(line_matches(line, name) for name in drop)]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    kept.append(f"{ident} {key.get_name()} {key.get_base64()}\n")
    return "".join(kept)


def without_ids(old_text: str, ids: Iterable[str]) -> str:
    """known_hosts content without the lines naming any of ids."""
    drop = set(ids)
    return "".join(line for line in old_text.splitlines(keepends=True)
                   if not any(line_matches(line, name) for name in drop))
