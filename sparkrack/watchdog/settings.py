"""The watchdog's node as watch.install, watch.uninstall and watch.status share it: where
the watchdog goes there and how it runs (`Settings`), the one-round-trip probe of that node
(its query and parser in sparkrack/facts/watchdog.py, the node side in
sparkrack/remote/watchdog.py), one command run there, and the metrics' address.

systemd is reached only through `Settings.systemctl` and the unit and state paths in
Settings, so the tests can put a fake systemctl and temporary paths on a loopback "node".
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.facts import watchdog as watchdog_facts
from sparkrack.facts.queries import Query
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.facts.watchdog import NodeState
from sparkrack.inventory.values import address_problem
from sparkrack.inventory.watchdog_dir import FIX as INSTALL_DIR_FIX
from sparkrack.inventory.watchdog_dir import install_dir_problem, plain_path_problem
from sparkrack.watchdog import payload
from sparkrack.watchdog.__main__ import parse_listen

UNIT = "sparkrack-watchdog.service"
PLAY = "watchdog.yml"  # roles/watchdog.yml: the roles watch.install runs on the node
DEFAULT_INSTALL_DIR = "/opt/sparkrack-watchdog"
DEFAULT_PYTHON = "/usr/bin/python3"
STATE_DIR = "/var/lib/sparkrack/watchdog"  # the unit's StateDirectory=sparkrack/watchdog
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
    allow_power_cycle: bool = False  # may cut a latched node's power (watchdog/cycling.py)

    @property
    def unit_path(self) -> str:
        return f"{self.unit_dir}/{UNIT}"

    @property
    def state_file(self) -> str:
        return f"{self.state_dir}/state.json"

    @property
    def key_path(self) -> str:
        return f"{self.install_dir}/{payload.KEY_FILE}"


def service_vars(settings: Settings) -> dict:
    """The vars role watchdog needs to find the service (install and uninstall)."""
    return {"watchdog_install_dir": settings.install_dir, "watchdog_unit": UNIT,
            "watchdog_unit_dir": settings.unit_dir, "watchdog_systemctl": settings.systemctl,
            "watchdog_stamp": ""}


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
    return settings if settings.listen else dataclasses.replace(settings, listen=node.address)


def listen_argument(address: str, port: int) -> str:
    """ADDR:PORT as `python -m sparkrack.watchdog --listen` reads it ([v6]:PORT)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


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


def run_play(provision_fn, inventory, node, role: str | None, extra_vars: dict, say: Say, *,
             command: str, check: bool = False, absent: bool = False) -> tuple[list, object]:
    """A role of play watchdog.yml on node (None: all of them; check: plan only; absent:
    undo it): its changes, one line each, said as `command: role R: ...`, and the node's
    run. SparkrackError when it failed."""
    result = provision_fn(inventory, [node], play=PLAY, roles=role, check=check,
                          absent=absent, extra_vars=extra_vars)
    run = result.node(node.name)
    changes = [c for c in run.outcomes() if c.changed]
    for c in changes:  # a deferred change (daemon-reload) is no role's own
        who = "" if c.deferred else f"role {c.role}{' would' if check else ''}: "
        say(f"{command}: {who}{'would ' if check and c.deferred else ''}{c.summary}")
    lines = [f"{c.role}: {c.summary}" for c in changes]
    if result.exit_code:
        raise SparkrackError(f"role {role or 'watchdog'} on {node.name} failed: "
                             f"{run.error or failure(run)}",
                             fix=f"fix the node, then run {command} again")
    return lines, run


def failure(run) -> str:
    """The first failed task of a provisioning run, or its status."""
    return next((f"{c.task}: {c.summary}" for c in run.outcomes() if c.status == "failed"),
                run.status)


def from_root(argv) -> list[str]:
    """argv run from / : a Python started over SSH would put its working directory (the
    user's home) on sys.path before PYTHONPATH, where a stray `sparkrack` or `cryptography`
    folder would shadow the shipped one."""
    return ["sh", "-c", 'cd / && exec "$@"', "sh", *argv]


def run_step(fleet, node: str, argv, *, stdin: bytes | None = None, timeout: float = 120,
             what: str) -> str:
    """argv's output on node; a SparkrackError naming `what` and the output's last line."""
    result = fleet.run({node: argv}, stdin=stdin, timeout=timeout)[node]
    if not result.ok:
        detail = (result.stdout + result.stderr).strip().splitlines()
        raise SparkrackError(f"{what} on {node} failed: {result.error}"
                             + (f" ({detail[-1][:200]})" if detail else ""),
                             fix=f"fix {node}, then run the command again")
    return result.stdout


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
    return dataclasses.replace(settings, install_dir=install_dir)
