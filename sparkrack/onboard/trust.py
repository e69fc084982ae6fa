"""Step 1, trust: fetch a new node's SSH host key, show it, record it only when confirmed.

The key is read by fleet.hostkeys (key exchange only, no authentication). It is recorded
in the inventory's known_hosts (the only file the fleet trusts) when the operator confirms
the fingerprint: interactively, or with `--fingerprint SHA256:...` that must match. A key
that differs from one already recorded for the node's address, or for a node of the same
name, is refused, except the one of the node that `--replace` retires at the same address.

`run` is the step: it writes the inventory's known_hosts only on a real run with the key
confirmed, and always the scratch known_hosts the later steps' fleet trusts. Pure parts
(`host_id`, `decide`, `known_hosts_text`) are unit-tested; reading the key and the
known_hosts file is fleet.hostkeys'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkrack.core.atomic import write_atomically
from sparkrack.fleet import hostkeys
from sparkrack.fleet.hostkeys import HostKey, fingerprint, line_matches
from sparkrack.fleet.ssh import explain, who
from sparkrack.onboard.context import Context, Step

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


def run(ctx: Context) -> None:
    """Step 1: fetch the new node's key, decide, confirm, record (see the module doc)."""
    report, new, old = ctx.report, ctx.new, ctx.old
    real = ctx.inventory.known_hosts_path
    with ctx.step("trust") as step:
        keys = hostkeys.read_known_hosts(real)
        ident = host_id(new.address, new.port)
        own = [ident, new.name]
        current = next((n for n in (*ctx.inventory.nodes, *ctx.inventory.spares)
                        if n.name == new.name and n.name != report.replace), None)
        if current is not None:  # a spare onboarded again (perhaps at a new address)
            own.append(host_id(current.address, current.port))
        replaced = []  # the retired node's ids, where its key may differ from the new one
        if old is not None and (old.address == new.address or old.name == new.name):
            replaced = [host_id(old.address, old.port), old.name]
        own = [i for i in dict.fromkeys(own) if i not in replaced]
        recorded = hostkeys.recorded_keys(keys, [*own, *replaced])
        preferred = [t for ident_keys in recorded.values() for t in ident_keys]
        try:
            key = hostkeys.fetch_host_key(new, list(dict.fromkeys(preferred)))
        except hostkeys.FETCH_ERRORS as error:
            ctx.stop(step, "failed", explain(new, real, error))
        report.fingerprint = fingerprint(key)
        decision = decide(key, recorded, own, replaced, real, who(new))
        ctx.line(step, decision.message)
        if decision.state == CHANGED:
            ctx.stop(step, "refused", decision.message)
        text = real.read_text() if real.is_file() else ""
        if decision.state == KNOWN:
            ctx.known_hosts.write_text(text)
            ctx.set(step, "ok", f"{key.get_name()} {report.fingerprint} already trusted")
            return
        confirm_key(ctx, step, key, decision)
        updated = known_hosts_text(text, ident, key, decision.stale)
        ctx.known_hosts.write_text(updated)
        if report.check:
            confirmed = "" if ctx.options.fingerprint or ctx.options.confirm else \
                " once confirmed (--fingerprint)"
            ctx.set(step, "would", f"would record {key.get_name()} {report.fingerprint} in "
                    f"{real}{confirmed} (check: not written)")
            return
        write_atomically(real, updated)
        ctx.set(step, "changed", f"recorded {key.get_name()} {report.fingerprint} for "
                f"{ident} in {real}")


def confirm_key(ctx: Context, step: Step, key: HostKey, decision: Decision) -> None:
    """Stop unless the key is confirmed: --fingerprint must match, else the operator says
    yes; a check without either looks with the key UNCONFIRMED."""
    shown, name = ctx.report.fingerprint, ctx.report.name
    given, confirm = ctx.options.fingerprint, ctx.options.confirm
    if given is not None:
        if not same_fingerprint(given, shown):
            ctx.stop(step, "refused", f"--fingerprint {given} does not match the key "
                     f"{name} offers ({shown}): not trusted")
        ctx.line(step, f"--fingerprint matches {shown}")
        return
    if confirm is None and ctx.check:
        ctx.line(step, f"UNCONFIRMED {shown}: check mode uses it for this read-only look "
                 "and records it nowhere; a real run needs --fingerprint or a terminal")
        return
    if confirm is None:
        ctx.stop(step, "refused", (
            f"{name} offers {key.get_name()} {shown}; not confirmed "
            "(non-interactive): pass --fingerprint with the value read on the node's "
            "console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)"))
    question = (f"Trust {name} ({ctx.report.address}) with host key "
                f"{key.get_name()} {shown}?")
    if decision.stale:
        question += f" It replaces the recorded key of {', '.join(decision.stale)}."
    if not confirm(question):
        ctx.stop(step, "refused", "host key not confirmed by the operator")
    ctx.line(step, "confirmed by the operator")
