"""The rehearsal rack put back to healthy before a rack test, checked rather than trusted.

`repair_faults` (sparkrack.rehearsal.repair) reads the rack from this machine and undoes
what a test may have left: a node powered off, cut, hung or recabled, a latched or heated GPU, a
renumbered GID table, an HCA port down. `repair_engines` asks the nodes (one round trip
each) and stops any engine container and a held rack lock; the suite runs it at the start
(a rack used before the run) and after a rack test that failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sparkrack.rehearsal import repair
from sparkrack.rehearsal.nodeproc import init_pid
from sparkrack.rehearsal.rack import RehearsalRack

REPO = Path(__file__).resolve().parent.parent
# the simulated burn load's start-up during the suite, on every node a test boots (the
# real one's 4.4 s would add 4 s to every burn gate: well over a hundred of them), and the
# suite's burn length: the sampler reads the GPU about every 0.6 s (0.5 s and nvidia-smi's
# own time), so 1.2 s of load gives the two busy samples the judge wants in one run (1 s
# often gives one, and the load runs again)
LOAD_STARTUP_S = 0.1
QUICK_BURN_S = 1.2
HANG_GRACE_S = repair.HANG_GRACE_S  # a test may shorten it

# the stub engines' settings every engine test starts from (engine_rack writes them back)
STUB_CONFIG = {"load_delay_s": 0.3, "tokens_per_s": 50, "drain_poll_s": 0.5}


def repair_faults(rack: RehearsalRack) -> list[str]:
    """The rack's faults undone (sparkrack.rehearsal.repair), with this module's grace."""
    return repair.repair_faults(rack, HANG_GRACE_S)


def _in_node(rack: RehearsalRack, name: str, path: str) -> Path | None:
    """path inside the running node name, as this machine sees it (None: not running)."""
    pid = init_pid(rack.node(name))
    return Path(f"/proc/{pid}/root{path}") if pid else None


def stub_model_differs(rack: RehearsalRack, config: dict) -> list[str]:
    """The nodes whose stub model directory is not exactly write_stub_model(config)'s."""
    from sparkrack.rehearsal.stub.modeldir import model_files

    files = model_files(config)
    model_path = rack.inventory.vars.model_path.rstrip("/")
    differs = []
    for node in rack.nodes:
        root = _in_node(rack, node.name, model_path)
        try:
            same = root is not None and all((root / name).read_bytes() == data
                                            for name, data in files.items())
        except OSError:
            same = False
        if not same:
            differs.append(node.name)
    return differs


def clock_lock_differs(rack: RehearsalRack) -> list[str]:
    """The nodes whose simulated GPU clock lock is not the one the cap unit sets."""
    want = [0, rack.inventory.vars.clock_cap_mhz]
    return [node.name for node in rack.nodes
            if _read_lock(_in_node(rack, node.name, "/run/gpu-sim/clock-lock.json")) != want]


def _read_lock(path: Path | None) -> list | None:
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None


def repair_engines(inventory) -> list[str]:
    """Stop every engine container and break a held rack lock; what was done."""
    from sparkrack.deployments.ranks import engine_containers
    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle import lanes
    from sparkrack.lifecycle.stop import stop_ranks
    from sparkrack.oplock.lock import call

    repaired = []
    with Fleet(inventory) as fleet:
        holder = call(fleet, inventory.head.name, "show").holder
    if holder is not None:
        done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), "unlock",
                               "--force", "test suite: the rack put back to healthy", "-i",
                               str(inventory.path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        repaired.append(f"rack lock of {holder.operator} broken")
    with Fleet(inventory) as fleet:
        ranks, errors = engine_containers(fleet)
        assert not errors, errors
        if ranks:
            lanes.down(inventory)
            left, errors = engine_containers(fleet)
            assert not errors, errors
            problems = stop_ranks(fleet, left, timeout=3)
            assert not problems, problems
            repaired.append(f"{len(ranks)} engine container(s) stopped and removed")
    return repaired


def provisioned(inventory) -> None:
    """Every role provisioned on every node (a no-change run on a provisioned rack)."""
    from sparkrack.provision import provision

    report = provision(inventory)
    assert report.exit_code == 0, [report.recap(n.name) for n in inventory.nodes]


def ready_for_engines(rack: RehearsalRack, stub: dict) -> None:
    """The rack made ready for engines (conftest's engine_rack, or a module's fixture that
    starts engines once): provisioned (clock cap unit, env files, limits, the stub images
    from their tars on every node; a no-change run takes under a second), the stub model
    directory with stub's settings, and every GPU's clock lock as the cap unit sets it. The
    model files and clock locks are read from this machine (no SSH); only the nodes where
    they differ are written or restarted."""
    from sparkrack.fleet import Fleet
    from sparkrack.rehearsal.stub.modeldir import write_stub_model

    inventory = rack.inventory
    provisioned(inventory)
    stale_model = stub_model_differs(rack, stub)
    uncapped = clock_lock_differs(rack)  # a test or an operator reset it by hand
    if stale_model or uncapped:
        with Fleet(inventory, [inventory.node(n) for n in sorted({*stale_model, *uncapped})]) \
                as fleet:
            if stale_model:
                write_stub_model(fleet, stub, nodes=stale_model)
            if uncapped:
                fleet.run({name: ["systemctl", "restart", "sparkrack-clock-cap.service"]
                           for name in uncapped}).raise_for_failures()
    assert clock_lock_differs(rack) == []
