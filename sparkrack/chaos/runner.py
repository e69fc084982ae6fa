"""One chaos step on the rehearsal rack: the operator's command as a real `invoke` process,
its fault injected at its moment, the faults healed, the invariants judged, and after a
fault that hit a node or a rank, recovery (`down`, then `up`) timed and judged again."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..fleet import Fleet
from ..inventory import Inventory
from ..lifecycle.containers import engine_containers
from ..rehearsal.layout import HCAS
from ..rehearsal.rack import RehearsalRack
from ..rehearsal.repair import repair_faults
from .invariants import CHANGING, judge, observe
from .plan import NODE_FAULTS, Step

COMMAND_TIMEOUT_S = 600  # a command still running after this is a violation (hung)
SMALL_MODEL = "/models/chaos-small"  # weights.stage's model: three 1 MiB files on the head
RECOVERY_ENGINE = "sglang"
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
    recovery_s: float | None = None
    violations: list[str] = field(default_factory=list)


class Runner:
    """Runs steps on rack through `invoke` (invoke_argv: how to start it, e.g.
    [python, -m, invoke, -r, REPO]) with env (SPARKRACK_INVENTORY and the state folder)."""

    def __init__(self, rack: RehearsalRack, inventory: Inventory, invoke_argv: list[str],
                 env: dict[str, str], on_event: Callable[[str], None] = lambda e: None):
        self.rack = rack
        self.inventory = inventory
        self.invoke_argv = invoke_argv
        self.env = env
        self.say = on_event
        self.nodes = [n.name for n in inventory.nodes]

    # --- the command ----------------------------------------------------------------------

    def argv(self, step: Step) -> list[str]:
        """The operator's command line for step (after `invoke`)."""
        return {
            "up": ["up", "--engine", step.engine or RECOVERY_ENGINE],
            "roll": ["roll", step.engine or RECOVERY_ENGINE],
            "down": ["down"],
            "provision": ["provision"],
            "reboot": ["reboot", "--nodes", ",".join(step.nodes)],
            "weights": ["weights.stage", "--model", SMALL_MODEL],
            "run": ["run", "--", "cat", "/proc/loadavg"],
            "bench": ["bench", "--suite", "quick", "--tokens", "16"],
        }[step.op]

    def prepare(self) -> None:
        """What the steps need on the rack: the small model on the head."""
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
        result.tail = "".join(output)[-600:]
        hit = step.fault is not None and result.injected is not None \
            and not result.injected.startswith("not injected") \
            and step.fault.kind in (*NODE_FAULTS, "kill_rank", "head_lost")
        if hit and step.fault.kind == "head_lost":
            result.violations += self._break_glass(commands)
        result.repaired = repair_faults(self.rack)
        result.violations += self._judge(whole=not hit, commands=commands)
        if hit:
            self._recover(result)
        return result

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

    def _judge(self, *, whole: bool, commands: list[tuple[str, float]]) -> list[str]:
        seen = observe(self.rack, self.inventory,
                       Path(self.env["SPARKRACK_STATE_DIR"]) / "audit.jsonl")
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
        kind, node = fault.kind, fault.node
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
