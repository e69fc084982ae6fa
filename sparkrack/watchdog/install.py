"""`invoke watch.install`: the watchdog as a systemd service on one rack node (default:
the head); what uninstall.py and status.py share (Settings, the probe, the node).

Layers, each testable on its own:
- probe: ONE round trip to the watchdog's node (its query and parser in
  sparkrack/facts/watchdog.py, the node side in sparkrack/remote/watchdog.py) reports its
  Python, what is installed (lib manifest and its check, the inventory copy's hashes, the
  key, the unit file), the unit's state, the state file, and the address it reaches each
  node from, as a NodeState;
- plan_install (pure): what is there and what is wanted in, the steps out;
- install (apply) over the fleet, in that order, then a second probe that must
  find nothing left to do (a second install with nothing changed changes nothing).

What install does, in order: refuse a node whose Python cannot run this machine's
libraries (payload.platform_problem), an install directory that is not one sparkrack made
(installdir.py: absent, empty or carrying its marker; never a system directory) and a node
that cannot tell the address it reaches the nodes from (the key's from=); mark the
directory as sparkrack's; ship lib/ (one gzip'd tar on the command's stdin,
unpacked beside the old one and swapped in, byte-compiled there) when its manifest differs
or does not check; write the inventory copy and README; make the watchdog's ed25519 key
on the node with the shipped cryptography (the private key never leaves it) and read its
public key back; record it beside the inventory (keyrecord) and run role watchdog_key on
every node (provision); prove the key from the node (`python -m sparkrack.watchdog
--check-reach`: every node answers the watchdog's own key and pinned host keys); write the
unit, daemon-reload, enable and start it (restart when something it runs changed); wait
until /metrics answers. The metrics listen on --listen ADDR, by default the watchdog
node's management address (its ansible_host), not on every interface.

systemd is reached only through `Settings.systemctl` and the unit and state paths in
Settings, so the tests can put a fake systemctl and temporary paths on a loopback "node".
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SparkrackError, UsageError
from ..facts import watchdog as watchdog_facts
from ..facts.queries import Query
from ..facts.queries import argv as gather_argv
from ..facts.watchdog import NodeState
from ..inventory.values import address_problem
from ..remote import script, text
from . import payload
from ..inventory.watchdog_dir import (
    FIX as INSTALL_DIR_FIX, MARKER_FILE, MARKER_TEXT, install_dir_problem, kind_problem,
    plain_path_problem)
from ..inventory.watchdog_record import (
    MARKER, WatchdogKey, check_public_key, check_sources, read_record, record_path)

UNIT = "sparkrack-watchdog.service"
UNIT_TEMPLATE = Path(__file__).with_name("sparkrack-watchdog.service.j2")
DEFAULT_INSTALL_DIR = "/opt/sparkrack-watchdog"
DEFAULT_PYTHON = "/usr/bin/python3"
STATE_DIR = "/var/lib/sparkrack/watchdog"  # the unit's StateDirectory=sparkrack/watchdog
SHIP_TIMEOUT_S = 600.0  # unpacking and byte-compiling ~35 MB on a small node
METRICS_WAIT_S = 20.0
Say = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    """Where the watchdog goes on its node and how it is run."""

    install_dir: str = DEFAULT_INSTALL_DIR
    python: str = DEFAULT_PYTHON  # the node's interpreter (ExecStart)
    listen: str = ""  # metrics address ('': the watchdog node's address); port: the inventory's
    unit_dir: str = "/etc/systemd/system"
    state_dir: str = STATE_DIR
    systemctl: str = "systemctl"
    wait_metrics: bool = True  # after a start, wait until /metrics answers on the node

    @property
    def unit_path(self) -> str:
        return f"{self.unit_dir}/{UNIT}"

    @property
    def state_file(self) -> str:
        return f"{self.state_dir}/state.json"

    @property
    def key_path(self) -> str:
        return f"{self.install_dir}/{payload.KEY_FILE}"


def check_settings(settings: Settings) -> None:
    """UsageError for paths that cannot be what they say (they go into rm -rf and a unit),
    an install directory that is a system one, a listen address that is none."""
    for name in ("install_dir", "python", "unit_dir", "state_dir"):
        value = getattr(settings, name)
        if plain_path_problem(value):
            raise UsageError(f"--{name.replace('_', '-')} {value!r}: not a plain absolute path",
                             fix="give an absolute path without spaces, quotes or '..'")
    problem = install_dir_problem(settings.install_dir)
    if problem:
        raise UsageError(f"--install-dir {settings.install_dir}: {problem}", fix=INSTALL_DIR_FIX)
    inside = (settings.install_dir + "/").startswith(settings.state_dir + "/") or (
        settings.state_dir + "/").startswith(settings.install_dir + "/")
    if inside:
        raise UsageError(f"--install-dir {settings.install_dir}: shares its place with the "
                         f"state directory {settings.state_dir}", fix=INSTALL_DIR_FIX)
    if settings.listen and address_problem(settings.listen):
        raise UsageError(f"--listen {settings.listen} {address_problem(settings.listen)}",
                         fix="give the IP address (or host name) of the watchdog's node the "
                         "metrics listen on, e.g. its management address; 0.0.0.0: every "
                         "interface")


def with_listen(settings: Settings, node) -> Settings:
    """settings with the metrics address filled in: the node's management address
    (ansible_host) unless --listen named one."""
    import dataclasses

    return settings if settings.listen else dataclasses.replace(settings, listen=node.address)


def listen_argument(address: str, port: int) -> str:
    """ADDR:PORT as `python -m sparkrack.watchdog --listen` reads it ([v6]:PORT)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


# --- The probe ---------------------------------------------------------------------------


def probe_query(settings: Settings, peers) -> Query:
    """The probe of the watchdog's node (sparkrack/facts/watchdog.py); peers: (address,
    port) of every node."""
    return watchdog_facts.probe_query(
        python=settings.python, install_dir=settings.install_dir, key_path=settings.key_path,
        unit_path=settings.unit_path, state_dir=settings.state_dir,
        state_file=settings.state_file, systemctl=settings.systemctl, unit=UNIT, peers=peers)


def probe(fleet, node, settings: Settings, inventory) -> NodeState:
    """Run the probe on node (one round trip)."""
    query = probe_query(settings, [(n.address, n.port) for n in inventory.nodes])
    result = fleet.run({node.name: gather_argv([query])}, timeout=60)[node.name]
    if not result.ok:
        raise SparkrackError(f"probing the watchdog's node: {result.error}",
                             fix="check that the node answers (`invoke status`)")
    return watchdog_facts.parse_probe(result.stdout, query)


# --- What is wanted -----------------------------------------------------------------------


def render_unit(inventory, settings: Settings) -> str:
    """The systemd unit from sparkrack-watchdog.service.j2 (settings.listen filled in:
    with_listen)."""
    import jinja2

    if not settings.listen:
        raise ValueError("the unit's metrics address is not set (with_listen)")
    template = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                  autoescape=False).from_string(UNIT_TEMPLATE.read_text())
    return template.render(rack_name=inventory.vars.rack_name,
                           port=inventory.vars.watchdog_metrics_port,
                           install_dir=settings.install_dir, python=settings.python,
                           listen=listen_argument(settings.listen,
                                                  inventory.vars.watchdog_metrics_port))


@dataclass(frozen=True)
class Wanted:
    """What the node should have, built on this machine."""

    library: payload.Library
    manifest: str
    files: Mapping[str, bytes]  # relative to install_dir: inventory/..., README.md
    unit: str

    @property
    def manifest_sha256(self) -> str:
        return hashlib.sha256(self.manifest.encode()).hexdigest()


def wanted(inventory, settings: Settings, library: payload.Library | None = None) -> Wanted:
    """The payload for this inventory (checked: the copy loads as the original does)."""
    library = library or payload.build_library()
    copy = payload.inventory_copy(inventory, settings.install_dir)
    payload.check_inventory_copy(inventory, copy, settings.install_dir)
    files = {f"inventory/{path}": content for path, content in copy.items()}
    files["README.md"] = payload.readme()
    return Wanted(library, library.manifest(), files, render_unit(inventory, settings))


@dataclass
class InstallPlan:
    """The steps an install takes on the node (pure planning: NodeState + Wanted in)."""

    node: str
    refusal: str | None = None
    fix: str = payload.PLATFORM_FIX  # how to get past the refusal
    mark: bool = False  # write the marker into the install directory (first of all)
    ship_lib: bool = False
    write: dict[str, bytes] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    make_key: bool = False
    write_unit: bool = False
    reset_failed: bool = False
    enable: bool = False
    start: str | None = None  # "start" | "restart"

    @property
    def changes_node(self) -> bool:
        return bool(self.mark or self.ship_lib or self.write or self.delete or self.make_key
                    or self.write_unit or self.enable or self.start or self.reset_failed)

    def steps(self, settings: Settings) -> list[str]:
        """What the plan does, one line each (the check mode's output)."""
        d, written = settings.install_dir, sorted(self.write)
        return [line for wanted, line in (
            (self.mark, f"mark {d} as the watchdog's ({MARKER_FILE})"),
            (self.ship_lib, f"ship {d}/lib (sparkrack and its libraries)"),
            (written, f"write {len(written)} file(s) under {d}: " + ", ".join(written[:4])
             + (" ..." if len(written) > 4 else "")),
            (self.delete, f"delete {', '.join(self.delete)} under {d}"),
            (self.make_key, f"make the watchdog's ed25519 key {settings.key_path} on {self.node}"),
            (self.write_unit, f"write {settings.unit_path}; daemon-reload"),
            (self.reset_failed, f"reset-failed {UNIT}"),
            (self.enable, f"enable {UNIT} (started at boot)"),
            (self.start, f"{self.start} {UNIT}")) if wanted]


def plan_install(node: str, state: NodeState, want: Wanted,
                 control: payload.Platform, settings: Settings) -> InstallPlan:
    """What install must do on node to have want running there."""
    plan = InstallPlan(node)
    if state.platform is None:
        plan.refusal = (f"{node}: no usable Python at {settings.python}: "
                        f"{state.platform_error}")
        return plan
    problem = payload.platform_problem(control, state.platform, settings.python)
    if problem:
        plan.refusal = f"{node}: {problem}"
        return plan
    problem = kind_problem(settings.install_dir, state.install_dir_kind)
    if problem:
        plan.refusal, plan.fix = f"{node}: --install-dir {problem}", INSTALL_DIR_FIX
        return plan
    if not sources_of(state):
        plan.refusal = (f"{node}: cannot tell the address it reaches the nodes from ("
                        + ("; ".join(f"{peer}: {why}" for peer, why in state.sources.items())
                           or "no answer") + "): the watchdog's key would be authorized from "
                        "anywhere")
        plan.fix = ("make every node's ansible_host routable from it (the probe connects a UDP "
                    "socket to each, sending nothing), then run watch.install again")
        return plan
    plan.mark = state.install_dir_kind != "marked"
    plan.ship_lib = not (state.lib and state.lib_checks
                         and state.manifest_sha256 == want.manifest_sha256)
    for path, content in want.files.items():
        if state.files.get(path) != hashlib.sha256(content).hexdigest():
            plan.write[path] = content
    plan.delete = sorted(p for p in state.files if p not in want.files)
    plan.make_key = not state.private_key or not state.public_key
    plan.write_unit = state.unit_file != want.unit.encode()
    plan.reset_failed = state.unit.get("ActiveState") == "failed"
    plan.enable = not state.enabled
    changed = plan.ship_lib or plan.write or plan.delete or plan.make_key or plan.write_unit
    if not state.active:
        plan.start = "start"
    elif changed:
        plan.start = "restart"
    return plan


# --- Install -----------------------------------------------------------------------------


@dataclass
class InstallReport:
    """What an install found and did."""

    node: str
    plan: InstallPlan | None = None
    key: WatchdogKey | None = None
    recorded: bool = False  # the key record beside the inventory changed
    authorized: list[str] = field(default_factory=list)  # nodes whose authorized_keys changed
    reached: list[str] = field(default_factory=list)
    serving: str = ""  # the metrics URL, once it answered
    check: bool = False

    @property
    def changed(self) -> bool:
        return bool((self.plan and self.plan.changes_node) or self.recorded or self.authorized)


def from_root(argv) -> list[str]:
    """argv run from / : a Python started over SSH would put its working directory (the
    user's home) on sys.path before PYTHONPATH, where a stray `sparkrack` or `cryptography`
    folder would shadow the shipped one."""
    return ["sh", "-c", 'cd / && exec "$@"', "sh", *argv]


def run_step(fleet, node: str, argv, *, stdin: bytes | None = None, timeout: float = 120,
         what: str) -> str:
    result = fleet.run({node: argv}, stdin=stdin, timeout=timeout)[node]
    if not result.ok:
        detail = (result.stdout + result.stderr).strip().splitlines()
        raise SparkrackError(f"{what} on {node} failed: {result.error}"
                             + (f" ({detail[-1][:200]})" if detail else ""),
                             fix="fix the node, then run watch.install again")
    return result.stdout


def watchdog_node(inventory, on: str | None, record: WatchdogKey | None):
    if on:
        return inventory.node(on)
    if record is not None:
        return inventory.node(record.node)
    return inventory.head


def install(inventory, on: str | None = None, *, settings: Settings = Settings(),
            check: bool = False, say: Say = print, library: payload.Library | None = None,
            provision_fn=None) -> InstallReport:
    """Install (or bring up to date) the watchdog service on node `on` (default: where it
    is recorded, else the head). check: probe and say what would be done, change nothing."""
    from ..fleet import Fleet

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
    want = wanted(inventory, settings, library)
    report = InstallReport(node.name, check=check)
    with Fleet(inventory, [node]) as fleet:
        state = probe(fleet, node, settings, inventory)
        plan = plan_install(node.name, state, want, payload.Platform.local(), settings)
        report.plan = plan
        if plan.refusal:
            raise UsageError(plan.refusal, fix=plan.fix)
        sources = sources_of(state)
        if check:
            for line in plan.steps(settings):
                say(f"watch.install: would {line}")
            say(f"watch.install: would record the key in {record_path(inventory.path)}, "
                "authorize it on every node (role watchdog_key, from "
                f"{', '.join(sources)}) and check it from {node.name}")
            return report
        _apply(fleet, node, plan, want, settings, say)
        public = _key(fleet, node, settings, plan, state, say)
        _note_node(node, plan, settings)
        key = WatchdogKey(node.name, settings.install_dir, public, sources)
        report.key = key
        _authorize(inventory, key, report, say, provision_fn)
        report.reached = _reach(fleet, node, settings, inventory)
        say(f"watch.install: the watchdog's key reaches every node from {node.name}: "
            f"{', '.join(report.reached)}")
        _start(fleet, node, plan, settings, say)
        if settings.wait_metrics:
            report.serving = _wait_metrics(fleet, node, settings, inventory)
            say(f"watch.install: serving {report.serving}")
        after = probe(fleet, node, settings, inventory)
        again = plan_install(node.name, after, want, payload.Platform.local(), settings)
        if again.changes_node:
            differ = (f" (lib files that differ from what was shipped: "
                      f"{', '.join(after.lib_differs)}: something on the node rewrites them)"
                      if again.ship_lib and after.lib_differs else "")
            raise SparkrackError(f"watch.install did not converge on {node.name}: still to do: "
                                 + "; ".join(again.steps(settings)) + differ,
                                 fix="see `journalctl -u sparkrack-watchdog` on the node")
        if after.lib_edited:
            say(f"watch.install: note: {node.name} changed data files of lib/ in place "
                f"({', '.join(after.lib_edited)}); kept, as no code hashes them")
    return report


def _note_node(node, plan: InstallPlan, settings: Settings) -> None:
    """Tell the audit record what install changed on the watchdog's node."""
    from ..oplock.audit import note

    d = settings.install_dir
    files = [*([f"{d}/{MARKER_FILE}"] if plan.mark else []),
             *([f"{d}/lib"] if plan.ship_lib else []),
             *(f"{d}/{path}" for path in sorted(plan.write)),
             *(f"{d}/{path}" for path in plan.delete),
             *([settings.key_path] if plan.make_key else []),
             *([settings.unit_path] if plan.write_unit else [])]
    if plan.changes_node:
        note(nodes=[node.name], files=files)


def sources_of(state: NodeState) -> tuple[str, ...]:
    """The addresses the watchdog's node connects to the nodes from (for from=); none when
    the node could not tell (plan_install then refuses)."""
    good = [v for v in state.sources.values() if isinstance(v, str) and not v.startswith("error")]
    try:
        return check_sources(good)
    except ValueError:
        return ()


def _apply(fleet, node, plan: InstallPlan, want: Wanted, settings: Settings, say: Say) -> None:
    d = settings.install_dir
    if plan.mark:  # before anything goes in: a directory without it is never ours
        run_step(fleet, node.name, ["sh", "-c", 'umask 022; mkdir -p -- "$1" && printf %s "$3" '
                                '> "$1/$2"', "sh", d, MARKER_FILE, MARKER_TEXT],
             what="marking the install directory")
        say(f"watch.install: mark {d} as the watchdog's ({MARKER_FILE})")
    if plan.ship_lib:
        if plan.start == "restart":  # never run half old, half new modules: restarted below
            run_step(fleet, node.name, [settings.systemctl, "stop", UNIT], what="stopping the watchdog")
            say(f"watch.install: stop {UNIT} (its libraries change)")
        tar = want.library.tar(want.manifest)
        say(f"watch.install: shipping {d}/lib ({len(want.library.files)} files, "
            f"{len(tar) / 1e6:.1f} MB compressed: sparkrack and "
            f"{len(want.library.distributions)} libraries)")
        run_step(fleet, node.name, ["bash", "-c", text("ship"), "sparkrack-ship", d,
                                settings.python], stdin=tar, timeout=SHIP_TIMEOUT_S,
             what="unpacking lib/")
    if plan.write or plan.delete:
        folders = sorted({posixpath.dirname(f"{d}/{p}") for p in plan.write})
        removals = [f"{d}/{p}" for p in plan.delete]
        run_step(fleet, node.name, ["sh", "-c", 'umask 022; d=$1; shift; mkdir -p "$d"; '
                                'while [ "$1" != -- ]; do mkdir -p "$1"; shift; done; shift; '
                                'rm -f -- "$@"', "sh", d, *folders, "--", *removals],
             what="preparing the install directory")
        if plan.write:
            result = fleet.put({node.name: [(content, f"{d}/{path}", 0o644)
                                            for path, content in sorted(plan.write.items())]})
            result.raise_for_failures()
        for line in plan.steps(settings):
            if line.startswith(("write ", "delete ")) and not line.startswith(
                    f"write {settings.unit_path}"):
                say(f"watch.install: {line}")
    if plan.write_unit:
        result = fleet.put({node.name: [(want.unit.encode(), settings.unit_path, 0o644)]})
        result.raise_for_failures()
        run_step(fleet, node.name, [settings.systemctl, "daemon-reload"], what="daemon-reload")
        say(f"watch.install: write {settings.unit_path}; daemon-reload")


def _key(fleet, node, settings: Settings, plan: InstallPlan, state: NodeState,
         say: Say) -> str:
    """The watchdog's public key, made on the node first if it has none."""
    if not plan.make_key:
        return check_public_key(state.public_key)
    out = run_step(fleet, node.name, from_root(["env", f"PYTHONPATH={settings.install_dir}/lib",
                                            settings.python, "-c", script("keygen"),
                                            settings.key_path, f"{MARKER}@{node.name}"]),
               what="making the watchdog's key")
    public = check_public_key(out.strip().splitlines()[-1])
    say(f"watch.install: made the watchdog's key {settings.key_path} on {node.name} "
        f"(ed25519; the private key stays there)")
    return public


def _authorize(inventory, key: WatchdogKey, report: InstallReport, say: Say,
               provision_fn) -> None:
    """Record the key beside the inventory and authorize it on every node."""
    from ..oplock.audit import note
    from ..inventory.watchdog_record import write_record

    report.recorded = write_record(inventory.path, key)
    if report.recorded:
        say(f"watch.install: recorded the watchdog's key in {record_path(inventory.path)}")
    if provision_fn is None:
        from ..provision import provision as provision_fn
    result = provision_fn(inventory, roles="watchdog_key")
    bad = [run for run in result.nodes if result.recap(run.node)["failed"]
           or result.recap(run.node)["unreachable"]]
    report.authorized = [run.node for run in result.nodes if result.recap(run.node)["changed"]]
    files = sorted({a.path for run in result.nodes for c in run.plan if c.changed
                    for a in c.actions if hasattr(a, "path")})
    note(nodes=report.authorized, files=files)
    if bad:
        raise SparkrackError("authorizing the watchdog's key failed on " + "; ".join(
            f"{run.node}: {run.error or provision_failure(run)}" for run in bad),
            fix="fix those nodes, then run watch.install again")
    say(f"watch.install: the watchdog's key is authorized on every node (role watchdog_key; "
        f"{len(report.authorized)} changed)")


def provision_failure(run) -> str:
    return next((c.summary for c in run.outcomes() if c.status == "failed"), run.status)


def _reach(fleet, node, settings: Settings, inventory) -> list[str]:
    """From the node, with the shipped sparkrack, the watchdog's key and inventory copy:
    every node must answer. The node names that did."""
    d = settings.install_dir
    result = fleet.run({node.name: from_root([
        "env", f"PYTHONPATH={d}/lib", settings.python, "-m", "sparkrack.watchdog",
        "--inventory", f"{d}/inventory", "--check-reach"])}, timeout=120)[node.name]
    from ..fleet.results import last_json_object

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


def _start(fleet, node, plan: InstallPlan, settings: Settings, say: Say) -> None:
    sc = settings.systemctl
    commands = []
    if plan.reset_failed:
        commands.append([sc, "reset-failed", UNIT])
    if plan.enable:
        commands.append([sc, "enable", UNIT])
    if plan.start:
        commands.append([sc, plan.start, UNIT])
    for argv in commands:
        run_step(fleet, node.name, argv, what=" ".join(argv))
        say(f"watch.install: {' '.join(argv[1:])}")


def _wait_metrics(fleet, node, settings: Settings, inventory) -> str:
    """Wait on the node until its /metrics answers; the URL to reach it at."""
    local = metrics_url(node, inventory, settings.listen, on_node=True)
    run_step(fleet, node.name, from_root([settings.python, "-c", script("metrics"), local,
                                      str(METRICS_WAIT_S)]),
         timeout=METRICS_WAIT_S + 30, what="waiting for the watchdog's metrics")
    return metrics_url(node, inventory, settings.listen)


EVERY_INTERFACE = ("", "0.0.0.0", "::")


def metrics_url(node, inventory, listen: str, on_node: bool = False) -> str:
    """Where the metrics listening on `listen` are reached (from the node itself: on_node;
    every interface: at the node's address, or loopback on the node)."""
    host = listen
    if listen in EVERY_INTERFACE:
        host = "127.0.0.1" if on_node else node.address
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{inventory.vars.watchdog_metrics_port}/metrics"


def listen_of(unit: bytes | None) -> str:
    """The metrics address an installed unit's ExecStart gives --listen ('' if none)."""
    import shlex

    from .__main__ import parse_listen

    for line in (unit or b"").decode(errors="replace").splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart="))
            if "--listen" in argv[:-1]:
                try:
                    return parse_listen(argv[argv.index("--listen") + 1], 1)[0]
                except ValueError:
                    return ""
    return ""


def with_install_dir(settings: Settings, install_dir: str) -> Settings:
    """settings with the install directory the key record names."""
    import dataclasses

    return dataclasses.replace(settings, install_dir=install_dir)
