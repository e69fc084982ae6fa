"""`fleet.router.install`: SMG as a systemd service on the host the fleet file names, over
SSH with the fleet file's key and known_hosts (docs/fleet.md#installing-the-router).

The host needs python3 with its venv module, systemd, and no package index: this machine
sends it the pinned smg wheel and its one compiled dependency for the host's machine and
Python (its own installed ones packed back when they fit the host, else those kept from an
earlier install, else `pip download --only-binary`), and the host installs them into a
venv of its own with `pip --no-index --no-deps`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.inventory.model import Node
from sparkrack.inventory.schema import RackVars
from sparkrack.oplock.identity import state_dir
from sparkrack.racks.fleetfile import Fleet as FleetFile
from sparkrack.racks.repack import Host, RepackError, fits, installed, repack, tags
from sparkrack.racks.router import Router, RouterError
from sparkrack.racks.routerunit import INSTALL_DIR, UNIT, unit_text

HOST = "router"  # the router's host, as the fleet layer names it
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
# smg's `launch` imports setproctitle (compiled: one wheel per machine and Python) beside
# its own abi3 wheel; its other requirements serve `smg serve`, never started here
WHEELS = ("smg=={version}", "setproctitle")
PROBE = ("import os, platform, sys; libc = os.confstr('CS_GNU_LIBC_VERSION') or '-'; "
         "print(platform.machine(), '%d.%d' % sys.version_info[:2], libc.split()[-1])")
INSTALL = r"""
set -e
[ -x "$1/venv/bin/python" ] || python3 -m venv "$1/venv"
"$1/venv/bin/pip" install --quiet --no-index --no-deps --force-reinstall "$1"/wheels/*.whl
"""
READY_TIMEOUT_S = 60.0


def host_inventory(fleet: FleetFile) -> Inventory:
    """The router's host as a one-node inventory, so that the fleet layer's rules (host
    keys, the network guard, timeouts) hold for it too."""
    spec = fleet.router
    known = spec.known_hosts or Path("~/.ssh/known_hosts").expanduser()
    vars = RackVars(rack_name=f"{fleet.name}-router", tp_size=1, known_hosts_file=str(known))
    node = Node(HOST, spec.host, spec.ssh_port, spec.ssh_user, spec.ssh_key, -1, spec.host,
                vars)
    return Inventory(path=fleet.file.parent, nodes=(node,), vars=vars, groups={})


def wheels_for(version: str, host: Host, folder: Path) -> tuple[list[Path], str]:
    """(the wheels the host installs, where they came from): this machine's own installed
    smg (at version) and setproctitle packed back into wheels when their tags fit the host,
    else those kept in folder from an earlier install, else downloaded here into folder."""
    names = [w.format(version=version).split("==") for w in WHEELS]
    dists = [installed(name, *pinned) for name, *pinned in names]
    if all(d is not None and any(fits(t, host) for t in tags(d)) for d in dists):
        out = folder.parent / f"{folder.name}-installed"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        try:
            wheels = [repack(d, out) for d in dists]
        except RepackError:
            pass  # changed since installed: kept or downloaded ones instead
        else:
            return wheels, "this machine's installed " + ", ".join(
                f"{d.metadata['Name']} {d.version}" for d in dists) + ", packed back"
    kept = _found(folder, version)
    if len(kept) >= 2:
        return kept, f"kept in {folder}"
    folder.mkdir(parents=True, exist_ok=True)
    python = host.version
    platform = f"manylinux2014_{host.machine}"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary",
         ":all:", "--platform", platform, "--python-version", python, "--dest", str(folder),
         *(w.format(version=version) for w in WHEELS)], capture_output=True, text=True,
        timeout=600)
    if done.returncode != 0:
        raise SparkrackError(f"could not download smg {version} for {host.machine} and "
                             f"Python {python}: "
                             f"{(done.stderr.strip().splitlines() or ['?'])[-1]}",
                             fix="is the package index reachable from this machine?")
    found = _found(folder, version)
    if len(found) < 2:
        raise SparkrackError(f"smg {version}: no wheels for {host.machine} / Python {python}")
    return found, "downloaded"


def _found(folder: Path, version: str) -> list[Path]:
    return [p for p in sorted(folder.glob("*.whl"))
            if p.name.startswith((f"smg-{version}-", "setproctitle-"))]


def install_router(fleet: FleetFile, *, on_event: Callable[[str], None] = lambda e: None
                   ) -> None:
    """Install (or update) and start the router's service on its host; return once its API
    answers."""
    spec = fleet.router
    with Fleet(host_inventory(fleet)) as host:
        probe = host.run(["python3", "-c", PROBE], timeout=30)[HOST]
        if probe.status != "ok":
            raise SparkrackError(f"router host {spec.host}: {probe.error or probe.stderr}",
                                 fix="the host needs python3 and SSH with the fleet file's key")
        target = _host(probe.stdout)
        folder = (state_dir() / "router-wheels" /
                  f"{target.machine}-cp{target.version.replace('.', '')}")
        wheels, source = wheels_for(spec.version, target, folder)
        on_event(f"router host {spec.host}: {target.machine}, Python "
                 f"{target.version}; sending {', '.join(w.name for w in wheels)} "
                 f"({source})")
        host.run(["mkdir", "-p", f"{INSTALL_DIR}/wheels"], timeout=30).raise_for_failures()
        host.run(["sh", "-c", 'rm -f "$1"/wheels/*.whl', "sh", INSTALL_DIR],
                 timeout=30).raise_for_failures()
        host.put({HOST: [(w, f"{INSTALL_DIR}/wheels/{w.name}", 0o644) for w in wheels]},
                 timeout=300).raise_for_failures()
        host.run(["sh", "-c", INSTALL, "sh", INSTALL_DIR], timeout=300).raise_for_failures()
        host.put({HOST: [(unit_text(spec).encode(), UNIT_PATH, 0o644)]}).raise_for_failures()
        host.run(["sh", "-c", 'systemctl daemon-reload && systemctl enable --quiet "$1" && '
                  'systemctl restart "$1"', "sh", UNIT], timeout=60).raise_for_failures()
    wait_answers(Router(spec), READY_TIMEOUT_S)
    on_event(f"router SMG {spec.version} runs as {UNIT} on {spec.host}: {spec.url} "
             f"(metrics :{spec.metrics_port})")


def _host(probe: str) -> Host:
    """The router host as PROBE printed it: machine, Python, glibc ("-": none)."""
    machine, python, libc = probe.split()
    major, minor = python.split(".")
    glibc = tuple(int(x) for x in libc.split(".")[:2]) if libc[0].isdigit() else None
    return Host(machine, (int(major), int(minor)), glibc)


def wait_answers(router: Router, timeout: float) -> None:
    """Wait until the router's API answers; RouterError past timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            router.workers()
            return
        except RouterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
