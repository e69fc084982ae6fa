"""One chaos step on the rehearsal rack: the operator's command as a real `invoke` process,
its fault injected at its moment, the faults healed, the invariants judged, and after a
fault that hit a node or a rank, recovery (`down`, then `up`) timed and judged again.

The run works on a private copy of the rehearsal inventory (privatecopy.py): when the head
is lost for good (head_lost), `break-glass` stops the workers and `onboard --replace`
makes the spare (an extra node, SPARE) the head; the lost head, powered on again, is the
next spare. The plan's node names are ranks: a fault planned on spark-01 hits rank 0,
whichever node holds it now. `finish` puts the original head back and removes the spare."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.ranks import engine_containers
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.oplock import audit
from sparkrack.rehearsal.chaos.invariants import CHANGING, judge, observe
from sparkrack.rehearsal.chaos.plan import NODE_FAULTS, Step
from sparkrack.rehearsal.layout import HCAS
from sparkrack.rehearsal.nodeproc import in_node, init_pid
from sparkrack.rehearsal.privatecopy import host_key_fingerprint
from sparkrack.rehearsal.rack import RehearsalRack
from sparkrack.rehearsal.repair import repair_faults

COMMAND_TIMEOUT_S = 600  # a command still running after this is a violation (hung)
SPARE = ("spark-09", "10.77.1.19")  # the extra node a lost head is replaced with
SWAP_BURN_S = 1.2  # the spare's burn check during its onboarding
WATCHDOG_ON = "spark-08"  # the watchdog service's node: a worker, so a lost head leaves it
SMALL_MODEL = "/models/chaos-small"  # weights.stage's model: three 1 MiB files on the head
RECOVERY_ENGINE = "sglang"
# on a spare before it becomes the head: the ranks it ran as a head, exited with the power cut
CLEAR_ENGINES = 'ids=$(docker ps -aq --filter label=sparkrack.engine); [ -z "$ids" ] || ' \
    'docker rm -f $ids >/dev/null'
TASK_OF = {"weights": "weights.stage"}


@dataclass
class StepResult:
    """What one step did and found."""

    step: Step
    exit_code: int | None = None
    seconds: float = 0.0
    tail: str = ""
    injected: str | None = None  # what the fault did, or why it was not injected
    second_exit: int | None = None
    repaired: list[str] = field(default_factory=list)
    head_swap_s: float | None = None  # the lost head replaced by the spare in this long
    recovery_s: float | None = None
    violations: list[str] = field(default_factory=list)


class Runner:
    """Runs steps on rack through `invoke` (invoke_argv: how to start it, e.g.
    [python, -m, invoke, -r, REPO]) with env (SPARKRACK_INVENTORY: inventory's folder, a
    private copy; and the state folder)."""

    def __init__(self, rack: RehearsalRack, inventory: Inventory, invoke_argv: list[str],
                 env: dict[str, str]):
        self.rack = rack
        self.inventory = inventory
        self.invoke_argv = invoke_argv
        self.env = env
        self.local_audit = Path(env["SPARKRACK_STATE_DIR"]) / "audit.jsonl"
        self.planned = [n.name for n in inventory.nodes]  # the plan's names, by rank
        self.first_head = inventory.head
        self.spare, self.addresses = SPARE[0], {SPARE[0]: SPARE[1]}
        self.added_spare = False
        self.installed_watchdog = False

    @property
    def nodes(self) -> list[str]:
        """The members now, by rank."""
        return [n.name for n in self.inventory.nodes]

    def where(self, planned: str) -> str:
        """The member that holds the rank a planned node name stands for."""
        return self.nodes[self.planned.index(planned)]

    def extras(self) -> list[str]:
        """Members that are extra nodes of the rehearsal rack (the spare as head)."""
        return [n for n in self.nodes if n not in (x.name for x in self.rack.nodes)]

    # --- the command ----------------------------------------------------------------------

    def argv(self, step: Step) -> list[str]:
        """The operator's command line for step (after `invoke`)."""
        return {
            "up": ["up", "--engine", step.engine or RECOVERY_ENGINE],
            "roll": ["roll", step.engine or RECOVERY_ENGINE],
            "down": ["down"],
            "provision": ["provision"],
            "reboot": ["reboot", "--limit", ",".join(self.where(n) for n in step.nodes)],
            "weights": ["weights.stage", "--model", SMALL_MODEL],
            "run": ["run", "--", "cat", "/proc/loadavg"],
            "bench": ["bench", "--suite", "quick", "--tokens", "16"],
        }[step.op]

    def prepare(self) -> None:
        """What the steps need on the rack: the spare booted, the small model on the head,
        the watchdog service on WATCHDOG_ON (SparkrackError if it cannot be installed)."""
        if self.spare not in (n.name for n in self.rack.all_nodes):
            self.rack.add_node(*SPARE)
            self.added_spare = True
        self._small_model()
        self.installed_watchdog = self.invoke(["watch.status", "--on", WATCHDOG_ON]
                                              ).returncode != 0
        problem = self._install_watchdog([])
        if problem:
            raise SparkrackError(problem[0])

    def finish(self) -> list[str]:
        """The rack as the run found it: the first head back in its place (violations on
        the way), nothing running, the spare removed if the run added it."""
        violations = []
        self.invoke(["down"])  # before a head swap: it would leave rank 0 outside the rack
        if self.inventory.head.name != self.first_head.name:
            self.spare = self.first_head.name
            self.addresses[self.spare] = self.first_head.address
            violations += self._replace_head([], "the run ends")
        if self.installed_watchdog:
            self.invoke(["watch.uninstall", "--on", WATCHDOG_ON])
        if self.added_spare:
            self.rack.remove_node(SPARE[0])
        return violations

    def _install_watchdog(self, commands: list[tuple[str, float]]) -> list[str]:
        """`watch.install` on WATCHDOG_ON (again after a head swap: it ships the inventory
        that names the new head)."""
        ts = time.time()
        done = self.invoke(["watch.install", "--on", WATCHDOG_ON])
        commands.append(("watch.install", ts))
        return [] if done.returncode == 0 else [
            f"watch.install exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-300:]}"]

    def _small_model(self) -> None:
        head = self.inventory.head.name
        with Fleet(self.inventory, [self.inventory.head]) as fleet:
            fleet.run({head: ["mkdir", "-p", SMALL_MODEL]}).raise_for_failures()
            fleet.put({head: [(bytes([i]) * 2**20, f"{SMALL_MODEL}/part-{i}.bin", 0o644)
                              for i in range(3)]}).raise_for_failures()

    def invoke(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S
               ) -> subprocess.CompletedProcess:
        """Run `invoke ARGV` to its end (for recovery and the second operator)."""
        return subprocess.run([*self.invoke_argv, *argv], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    # --- a step ---------------------------------------------------------------------------

    def run_step(self, step: Step) -> StepResult:
        """Run step; its result with the violations found after it (and after recovery)."""
        result = StepResult(step)
        commands = []
        started, ts = time.monotonic(), time.time()
        if step.op in CHANGING or TASK_OF.get(step.op) in CHANGING:
            commands.append((TASK_OF.get(step.op, step.op), ts))
        proc = subprocess.Popen([*self.invoke_argv, *self.argv(step)], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
        reader.start()
        if step.fault is not None:
            result.injected = self._inject(step, proc, started, result, commands)
        try:
            result.exit_code = proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            result.violations.append(f"hung: `{' '.join(self.argv(step))}` still ran after "
                                     f"{COMMAND_TIMEOUT_S} s")
            proc.send_signal(signal.SIGINT)
            try:
                result.exit_code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                result.exit_code = proc.wait()
        reader.join(10)
        result.seconds = time.monotonic() - started
        if result.injected == "SIGINT sent" and commands and not self._began(*commands[0]):
            commands.clear()  # Ctrl-C as Python or invoke loaded: no task ran, none recorded
            result.injected = "SIGINT sent before the task began (nothing ran, nothing recorded)"
        result.tail = "".join(output)[-600:]
        hit = step.fault is not None and result.injected is not None \
            and not result.injected.startswith("not injected") \
            and step.fault.kind in (*NODE_FAULTS, "kill_rank", "head_lost")
        if hit and step.fault.kind == "head_lost":
            result.violations += self._break_glass(commands)
            swap_started = time.monotonic()
            swapped = self._replace_head(commands, "the head lost power")
            result.violations += swapped
            if not swapped:
                result.head_swap_s = time.monotonic() - swap_started
        result.repaired = repair_faults(self.rack, extras=self.extras())
        result.violations += self._judge(whole=not hit, commands=commands)
        if hit:
            self._recover(result)
        return result

    def _began(self, task: str, ts: float) -> bool:
        """A record of task, started at ts or later, is in the local audit copy (every task
        writes its start there first, lock or no lock)."""
        lines = audit.parse_lines(self.local_audit.read_text()) \
            if self.local_audit.exists() else []
        return any(r.get("task") == task and r.get("ts", 0) >= ts - 1 for r in lines)

    def _break_glass(self, commands: list[tuple[str, float]]) -> list[str]:
        """The head is gone: `break-glass` must stop every rank on the other nodes."""
        ts = time.time()
        done = self.invoke(["break-glass", "chaos: the head lost power", "--yes"])
        commands.append(("break-glass", ts))
        if done.returncode != 0:
            return [f"break-glass exited {done.returncode}: "
                    f"{(done.stderr or done.stdout).strip()[-300:]}"]
        workers = [n for n in self.inventory.nodes if n.name != self.inventory.head.name]
        with Fleet(self.inventory, workers) as fleet:
            ranks, errors = engine_containers(fleet)
        left = [f"rank {r.rank} on {r.node}" for r in ranks if r.alive]
        return [f"break-glass: still running: {', '.join(left)}"] if left else \
            [f"break-glass: docker not asked on {', '.join(errors)}"] if errors else []

    def _replace_head(self, commands: list[tuple[str, float]], why: str) -> list[str]:
        """`onboard SPARE --replace HEAD`: the spare (booted, an old head's exited ranks
        removed) becomes the head; the head it replaces is the next spare."""
        lost, spare = self.inventory.head, self.spare
        self.addresses.setdefault(lost.name, lost.address)
        if init_pid(self.rack.node(spare)) is None:
            self.rack.poweron(spare)
        in_node(self.rack.node(spare), ["sh", "-c", CLEAR_ENGINES])
        ts = time.time()
        done = self.invoke(["onboard", spare, "--address", self.addresses[spare], "--replace",
                            lost.name, "--fingerprint", host_key_fingerprint(self.rack, spare),
                            "--yes", "--burn-seconds", str(SWAP_BURN_S)])
        commands.append(("onboard", ts))
        if done.returncode != 0:
            return [f"head swap ({why}): `onboard {spare} --replace {lost.name}` exited "
                    f"{done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"]
        self.inventory = load_inventory(self.inventory.path)
        self.spare = lost.name
        self._small_model()
        return self._install_watchdog(commands)

    def _judge(self, *, whole: bool, commands: list[tuple[str, float]]) -> list[str]:
        seen = observe(self.rack, self.inventory, self.local_audit, WATCHDOG_ON)
        return judge(seen, cap_mhz=self.inventory.vars.clock_cap_mhz, nodes=self.nodes,
                     whole=whole, commands=commands)

    def _recover(self, result: StepResult) -> None:
        """down, then up: the rack serving again; the time it took, or the violation."""
        started, ts = time.monotonic(), time.time()
        for argv in (["down"], ["up", "--engine", RECOVERY_ENGINE]):
            done = self.invoke(argv)
            if done.returncode != 0:
                result.violations.append(f"recovery: `invoke {' '.join(argv)}` exited "
                                         f"{done.returncode}: {(done.stderr or done.stdout)[-300:]}")
                return
        result.recovery_s = time.monotonic() - started
        result.violations += [f"after recovery: {v}" for v in self._judge(
            whole=True, commands=[("down", ts), ("up", ts)])]

    # --- faults ---------------------------------------------------------------------------

    def _inject(self, step: Step, proc: subprocess.Popen, started: float, result: StepResult,
                commands: list[tuple[str, float]]) -> str:
        """Wait for the fault's moment, then inject it (unless the command ended first)."""
        fault = step.fault
        while time.monotonic() - started < fault.at_s:
            if proc.poll() is not None:
                return (f"not injected: the command ended first "
                        f"({time.monotonic() - started:.1f} s)")
            time.sleep(0.05)
        kind, node = fault.kind, self.where(fault.node) if fault.node else None
        if kind == "sigint":
            proc.send_signal(signal.SIGINT)
            return "SIGINT sent"
        if kind == "second_operator":
            ts = time.time()
            done = self.invoke(["down"], timeout=COMMAND_TIMEOUT_S)
            result.second_exit = done.returncode
            commands.append(("down", ts))
            return f"a second operator's `down` exited {done.returncode}"
        if kind == "kill_rank":
            return self._kill_rank(node)
        if kind == "head_lost":
            self.rack.poweroff(node)
            return f"the head {node} powered off"
        if kind == "cut":
            self.rack.cut(node)
        elif kind == "poweroff":
            self.rack.poweroff(node)
        elif kind == "latch":
            self.rack.latch(node)
        elif kind == "hca_down":
            self.rack.hca_down(node, sorted(HCAS)[0])
        elif kind == "renumber_gid":
            self.rack.renumber_gid(node, 5)
        return f"{kind} on {node}"

    def _kill_rank(self, node: str) -> str:
        with Fleet(self.inventory, [self.inventory.node(node)]) as fleet:
            ranks, _ = engine_containers(fleet)
            alive = [r for r in ranks if r.alive]
            if not alive:
                return f"not injected: no rank running on {node}"
            fleet.docker(node).kill(alive[0].name)
        return f"rank {alive[0].rank} on {node} killed"


__all__ = ["COMMAND_TIMEOUT_S", "Runner", "SMALL_MODEL", "StepResult"]
