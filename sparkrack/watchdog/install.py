"""`invoke watch.install`: the watchdog as a systemd service on one rack node (default: the
head), put there by its own parts and provisioning's play roles/watchdog.yml, in order
(docs/watchdog.md#installing-it-on-a-node).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.facts.watchdog import NodeState
from sparkrack.inventory.watchdog_dir import FIX as INSTALL_DIR_FIX
from sparkrack.inventory.watchdog_dir import kind_problem
from sparkrack.inventory.watchdog_record import (
    WatchdogKey,
    check_public_key,
    check_sources,
    read_record,
    record_path,
    watchdog_node,
)
from sparkrack.remote import script
from sparkrack.watchdog import payload
from sparkrack.watchdog.settings import (
    Say,
    Settings,
    check_settings,
    failure,
    from_root,
    listen_argument,
    metrics_url,
    probe,
    run_play,
    run_step,
    service_vars,
    with_listen,
)
from sparkrack.watchdog.ship import Parts, apply_parts, lib_current, plan_parts

METRICS_WAIT_S = 20.0
_SYSTEMD_ESCAPED = re.compile(r'([\\"`$])')  # what a double-quoted EnvironmentFile value escapes


@dataclass
class InstallReport:
    """What an install found and did."""

    node: str
    parts: Parts | None = None
    role: list[str] = field(default_factory=list)  # the role's changes, one line each
    key: WatchdogKey | None = None
    recorded: bool = False  # the key record beside the inventory changed
    authorized: list[str] = field(default_factory=list)  # nodes whose authorized_keys changed
    reached: list[str] = field(default_factory=list)
    serving: str = ""  # the metrics URL, once it answered
    check: bool = False

    @property
    def changed(self) -> bool:
        return bool((self.parts and self.parts.changes_node) or self.role or self.recorded
                    or self.authorized)


def refusal(node: str, state: NodeState, settings: Settings) -> tuple[str, str] | None:
    """(why, fix) when install must not touch the node, else None (pure)."""
    if state.platform is None:
        return (f"{node}: no usable Python at {settings.python}: {state.platform_error}",
                payload.PLATFORM_FIX)
    problem = payload.platform_problem(payload.Platform.local(), state.platform,
                                       settings.python)
    if problem:
        return f"{node}: {problem}", payload.PLATFORM_FIX
    problem = kind_problem(settings.install_dir, state.install_dir_kind)
    if problem:
        return f"{node}: --install-dir {problem}", INSTALL_DIR_FIX
    if not sources_of(state):
        return (f"{node}: cannot tell the address it reaches the nodes from ("
                + ("; ".join(f"{peer}: {why}" for peer, why in state.sources.items())
                   or "no answer") + "): the watchdog's key would be authorized from anywhere",
                "make every node's ansible_host routable from it (the probe connects a UDP "
                "socket to each, sending nothing), then run watch.install again")
    return None


def sources_of(state: NodeState) -> tuple[str, ...]:
    """The addresses the watchdog's node connects to the nodes from (for from=); none when
    the node could not tell."""
    good = [v for v in state.sources.values() if isinstance(v, str) and not v.startswith("error")]
    try:
        return check_sources(good)
    except ValueError:
        return ()


def role_vars(inventory, settings: Settings, state: NodeState, manifest_sha256: str = "",
              environ: Mapping[str, str] = os.environ, *, node: str | None = None) -> dict:
    """The vars of play watchdog.yml: the inventory copy (checked: it loads as the
    original does) and README, the files of an older copy to remove, the unit's settings
    (node: the watchdog's, default the head), the stamp of what the service runs (with the
    node's key as the probe found it)."""
    copy = payload.inventory_copy(inventory, settings.install_dir)
    payload.check_inventory_copy(inventory, copy, settings.install_dir)
    files = {f"inventory/{path}": content.decode() for path, content in copy.items()}
    files["README.md"] = payload.readme().decode()
    folders = {posixpath.dirname(path) for path in files} - {""}
    return {**service_vars(settings), "watchdog_python": settings.python,
            "watchdog_listen": listen_argument(settings.listen,
                                               inventory.vars.watchdog_metrics_port),
            "watchdog_node": node or inventory.head.name,
            "watchdog_power_cycle": " --allow-power-cycle" if settings.allow_power_cycle else "",
            **pdu_env_vars(inventory, settings, environ),
            "watchdog_files": files,
            "watchdog_dirs": sorted({f for d in folders for f in _parents(d)}),
            "watchdog_stale": sorted(p for p in state.files if p not in files),
            "watchdog_stamp": stamp(manifest_sha256, state.public_key, files)}


def pdu_env_vars(inventory, settings: Settings,
                 environ: Mapping[str, str] = os.environ) -> dict:
    """Role watchdog's PDU vars: with --allow-power-cycle, the EnvironmentFile holding the
    PDU's SNMPv3 user and keys as this machine's environment gives them, and its values as
    secrets (never shown in a diff or summary); the service then reads the strip for its
    metrics and may cut a latched node's power. Cycling requires them (UsageError without
    a pdu: section, PduError when they are not set). Without the flag: none, whatever is
    exported (the file goes): the keys switch every outlet, and root on the watchdog's
    node would hold them for nothing (docs/watchdog.md#installing-it-on-a-node)."""
    from sparkrack.pdu.families import family_of
    from sparkrack.pdu.snmp import credentials

    none = {"watchdog_pdu_env": "", "watchdog_pdu_keys": [], "secret_values": []}
    if not settings.allow_power_cycle:
        return none
    pdu = inventory.vars.pdu
    if pdu is None:
        raise UsageError(f"{inventory.path}: --allow-power-cycle, but the inventory has "
                         "no pdu: section: nothing could cut a node's power",
                         fix="name the rack's PDU and its outlets (docs/inventory.md), "
                         "or install without --allow-power-cycle")
    if not family_of(pdu).switched:
        raise UsageError(f"--allow-power-cycle, but PDU {pdu.name} is a {pdu.model}: a "
                         "metered strip that does not switch outlets",
                         fix="install without --allow-power-cycle, or name a switched model "
                         "in pdu.model (docs/inventory.md#the-pdu)")
    keys = credentials(pdu, environ)
    values = {pdu.user_env: keys.user, pdu.auth_key_env: keys.auth_key,
              pdu.priv_key_env: keys.priv_key}
    return {"watchdog_pdu_env": environment_file(values),
            "watchdog_pdu_keys": sorted(values), "secret_values": [keys.auth_key,
                                                                   keys.priv_key]}


def environment_file(values: Mapping[str, str]) -> str:
    """A systemd EnvironmentFile: NAME="value" with \\ " ` $ escaped, as systemd reads a
    double-quoted value (UsageError for a value with a line break or NUL)."""
    lines = ["# Managed by sparkrack (watch.install --allow-power-cycle): the PDU's SNMPv3 "
             "user and keys\n"]
    for name, value in sorted(values.items()):
        if any(c in value for c in "\r\n\0"):
            raise UsageError(f"{name}: a line break or NUL in the value",
                             fix="an SNMPv3 user or key is one line of printable text")
        escaped = _SYSTEMD_ESCAPED.sub(r"\\\1", value)
        lines.append(f'{name}="{escaped}"\n')
    return "".join(lines)


def stamp(manifest_sha256: str, public_key: str, files: dict) -> str:
    """What the service runs, one line each: a change restarts it (role watchdog)."""
    return "".join([f"lib {manifest_sha256}\n", f"key {' '.join(public_key.split()[:2])}\n",
                    *(f"file {hashlib.sha256(text.encode()).hexdigest()} {path}\n"
                      for path, text in sorted(files.items()))])


def _parents(folder: str) -> list[str]:
    parts = folder.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def install(inventory, on: str | None = None, *, settings: Settings = Settings(),
            check: bool = False, say: Say = print, library: payload.Library | None = None,
            provision_fn=None) -> InstallReport:
    """Install (or bring up to date) the watchdog service on node `on` (default: where it
    is recorded, else the head). check: probe and say what would be done, change nothing."""
    from sparkrack.fleet import Fleet

    if provision_fn is None:
        from sparkrack.provision import provision as provision_fn
    check_settings(settings)
    record = read_record(inventory.path)
    node = watchdog_node(inventory, on, record)
    settings = with_listen(settings, node)
    if record is not None and record.node != node.name:
        raise UsageError(f"the watchdog is installed on {record.node} (recorded in "
                         f"{record_path(inventory.path)}), not {node.name}: one watchdog "
                         "per rack", fix=f"run `invoke watch.uninstall` first, or install "
                         f"with --on {record.node}")
    if record is not None and record.install_dir != settings.install_dir:
        raise UsageError(f"the watchdog is installed in {record.install_dir} on {node.name}",
                         fix="run `invoke watch.uninstall` first to move it")
    library = library or payload.build_library()
    manifest = library.manifest()
    want = hashlib.sha256(manifest.encode()).hexdigest()
    report = InstallReport(node.name, check=check)
    with Fleet(inventory, [node]) as fleet:
        state = probe(fleet, node, settings, inventory)
        refused = refusal(node.name, state, settings)
        if refused:
            raise UsageError(refused[0], fix=refused[1])
        report.parts = parts = plan_parts(state, want)
        wanted = role_vars(inventory, settings, state, want, node=node.name)
        if check:
            for line in parts.steps(settings, node.name):
                say(f"watch.install: would {line}")
            _run_role(provision_fn, inventory, node, None, wanted, report, say, check=True)
            say(f"watch.install: would record the key in {record_path(inventory.path)}, "
                "authorize it on every node (role watchdog_key, from "
                f"{', '.join(sources_of(state))}) and check it from {node.name}")
            return report
        made = apply_parts(fleet, node.name, parts, library, manifest, settings, say)
        _note(node.name, parts.paths(settings))
        _run_role(provision_fn, inventory, node, "watchdog_files", wanted, report, say,
                  check=False)
        key = WatchdogKey(node.name, settings.install_dir,
                          made or check_public_key(state.public_key), sources_of(state))
        report.key = key
        _authorize(inventory, key, report, say, provision_fn)
        report.reached = _reach(fleet, node, settings)
        say(f"watch.install: the watchdog's key reaches every node from {node.name}: "
            f"{', '.join(report.reached)}")
        wanted["watchdog_stamp"] = stamp(want, key.public_key, wanted["watchdog_files"])
        _run_role(provision_fn, inventory, node, "watchdog", wanted, report, say, check=False)
        if settings.wait_metrics:
            report.serving = _wait_metrics(fleet, node, settings, inventory)
            say(f"watch.install: serving {report.serving}")
        after = probe(fleet, node, settings, inventory)
        if not lib_current(after, want):
            differ = (f" (files that differ from what was shipped: "
                      f"{', '.join(after.lib_differs)}: something on the node rewrites them)"
                      if after.lib_differs else "")
            raise SparkrackError(f"watch.install did not converge on {node.name}: its lib/ "
                                 f"does not check{differ}",
                                 fix="see `journalctl -u sparkrack-watchdog` on the node")
        if after.lib_edited:
            say(f"watch.install: note: {node.name} changed data files of lib/ in place "
                f"({', '.join(after.lib_edited)}); kept, as no code hashes them")
    return report


def _run_role(provision_fn, inventory, node, role: str | None, wanted: dict,
              report: InstallReport, say: Say, *, check: bool) -> None:
    """A role of the play on node (None: all of them; check: plan only); its changes said,
    added to report.role and noted in the audit record."""
    lines, run = run_play(provision_fn, inventory, node, role, wanted, say,
                          command="watch.install", check=check)
    report.role += lines
    if not check:
        _note(node.name, sorted({a.path for c in run.plan if c.changed for a in c.actions
                                 if hasattr(a, "path")}))


def _note(node: str, files: list[str]) -> None:
    """Tell the audit record what install changed on the watchdog's node."""
    from sparkrack.oplock.audit import note

    if files:
        note(nodes=[node], files=files)


def _authorize(inventory, key: WatchdogKey, report: InstallReport, say: Say,
               provision_fn) -> None:
    """Record the key beside the inventory and authorize it on every node."""
    from sparkrack.inventory.watchdog_record import write_record
    from sparkrack.oplock.audit import note

    report.recorded = write_record(inventory.path, key)
    if report.recorded:
        say(f"watch.install: recorded the watchdog's key in {record_path(inventory.path)}")
    result = provision_fn(inventory, roles="watchdog_key")
    bad = [run for run in result.nodes if result.recap(run.node)["failed"]
           or result.recap(run.node)["unreachable"]]
    report.authorized = [run.node for run in result.nodes if result.recap(run.node)["changed"]]
    files = sorted({a.path for run in result.nodes for c in run.plan if c.changed
                    for a in c.actions if hasattr(a, "path")})
    note(nodes=report.authorized, files=files)
    if bad:
        raise SparkrackError("authorizing the watchdog's key failed on " + "; ".join(
            f"{run.node}: {run.error or failure(run)}" for run in bad),
            fix="fix those nodes, then run watch.install again")
    say(f"watch.install: the watchdog's key is authorized on every node (role watchdog_key; "
        f"{len(report.authorized)} changed)")


def _reach(fleet, node, settings: Settings) -> list[str]:
    """From the node, with the shipped sparkrack, the watchdog's key and inventory copy:
    every node must answer. The node names that did."""
    from sparkrack.fleet.results import last_json_object

    d = settings.install_dir
    result = fleet.run({node.name: from_root([
        "env", f"PYTHONPATH={d}/lib", settings.python, "-m", "sparkrack.watchdog",
        "--inventory", f"{d}/inventory", "--check-reach"])}, timeout=120)[node.name]
    answer = last_json_object(result.stdout)
    failed = answer.get("failed") or {}
    if result.ok and not failed and answer.get("ok"):
        return list(answer["ok"])
    if failed:
        raise SparkrackError(
            f"from {node.name}, the watchdog's key does not reach " + "; ".join(
                f"{name}: {why}" for name, why in failed.items()),
            fix="ssh_authorized_keys_file must name the file each node's sshd reads the keys "
            "from (`sshd -T | grep authorizedkeysfile` on the node); then watch.install again")
    detail = (result.stderr or result.stdout).strip().splitlines()
    raise SparkrackError(f"the watchdog does not run on {node.name}: "
                         f"{detail[-1][:300] if detail else result.error}",
                         fix="see the error above; then run watch.install again")


def _wait_metrics(fleet, node, settings: Settings, inventory) -> str:
    """Wait on the node until its /metrics answers; the URL to reach it at."""
    local = metrics_url(node, inventory, settings.listen, on_node=True)
    run_step(fleet, node.name, from_root([settings.python, "-c", script("metrics"), local,
                                          str(METRICS_WAIT_S)]),
             timeout=METRICS_WAIT_S + 30, what="waiting for the watchdog's metrics")
    return metrics_url(node, inventory, settings.listen)
