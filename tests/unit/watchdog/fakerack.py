"""The fakes of the watchdog service's tests: a rack and its groups answering as the test
says, the power cycle included (a cycle of the service's own node ends the process:
PowerGone), and the helpers that build polls, deployments and watchdogs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.ranks import Rank
from sparkrack.deployments.record import Deployment
from sparkrack.facts.gpu import GpuSample, Thermal
from sparkrack.facts.node import GpuFacts, NodeFacts, UnitFacts
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.pdu import PduConfig
from sparkrack.inventory.schema import FrozenMapping, RackVars
from sparkrack.watchdog.gpuwatch import judge
from sparkrack.watchdog.metrics import WatchdogMetrics
from sparkrack.watchdog.service import Watchdog
from sparkrack.watchdog.watch import Poll


class PowerGone(BaseException):
    """The service's own node lost its power at the cut: the process ends there."""


NAMES = ("spark-01", "spark-02", "spark-03")


def rack_inventory(**rack_vars) -> Inventory:
    """The fakes' rack: NAMES on loopback addresses (never contacted), each on its outlet
    of a PDU (pdu=None: none)."""
    rack_vars.setdefault("pdu", PduConfig("pdu", "127.0.0.9", tuple(
        (name, i + 1) for i, name in enumerate(NAMES))))
    rack = RackVars(tp_size=len(NAMES), **rack_vars)
    nodes = tuple(Node(name, f"127.0.0.{i + 1}", 22, "root", None, i, f"127.0.0.{i + 1}", rack)
                  for i, name in enumerate(NAMES))
    return Inventory(Path("/nonexistent"), nodes, rack, FrozenMapping({"sparks": NAMES}))


def deployment(deployment_id: str) -> Deployment:
    return Deployment(engine="sglang", profile="512k", deployment_id=deployment_id,
                      spec_hash="f" * 64, image="lmsysorg/sglang:v0.5.22-cu130",
                      image_id="sha256:" + "a" * 64)


def ranks_of(deployment_id: str, status: dict[str, str] | None = None) -> list[Rank]:
    return [Rank(node=name, rank=i, name=f"sparkrack-sglang-rank{i}", engine="sglang",
                 profile="512k", deployment=deployment_id,
                 status=(status or {}).get(name, "running"), exit_code=None, stop_timeout=120)
            for i, name in enumerate(NAMES)]


def healthy(deployment_id: str) -> Poll:
    return Poll(memory={n: (128 << 20, 100 << 20) for n in NAMES},
                states=ranks_of(deployment_id), head_status=200)


@dataclass
class FakeGroup:
    polls: list[Poll]
    stops: list[tuple[dict, bool]] = field(default_factory=list)
    ranks: list[Rank] = field(default_factory=list)
    unwatched: str | None = None
    reapplied: list[tuple[str, str]] = field(default_factory=list)

    def poll(self) -> Poll:
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]

    def stop(self, lost=None, remove=True) -> dict:
        self.stops.append((dict(lost or {}), remove))
        return {}

    def ratcheting(self) -> set[str]:
        return set()

    def left_behind(self, lost) -> list[Rank]:
        return [r for r in self.ranks if r.node in (lost or {})]

    def reapply_cap(self, finding, by):
        from sparkrack.watchdog.capguard import Reapplied

        self.reapplied.append((finding.node, by))
        return Reapplied(finding.node, True, f"{finding.node}: clock cap re-applied", "ok")


@dataclass
class FakeRack:
    current: Deployment | None = None
    last_good: Deployment | None = None
    containers: list[Rank] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    holder: str | None = None
    records_error: bool = False
    restart_error: Exception | None = None
    groups: list[FakeGroup] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    still_lost: set[str] = field(default_factory=set)  # nodes stop_left_behind cannot reach
    stopped_left: list[Rank] = field(default_factory=list)
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (deployment, verdict, failure)
    cycles: list[str] = field(default_factory=list)  # nodes power-cycled
    finished: list[str] = field(default_factory=list)  # cycles finished after a boot
    kept: list[object] = field(default_factory=list)  # the pending restarts, as kept
    cycle_ok: bool = True
    relatch: bool = False  # the group started again reads latched again (the flap)
    strip_reading: object = None
    tcp: dict[str, str] = field(default_factory=dict)  # node: what its SSH port's TCP does

    def strip(self):
        return self.strip_reading

    def kernel_answers(self, node):
        return self.tcp.get(node, "no answer")

    def power_cycle(self, node, cause, deployment, own, keep):
        """As nodecycle.cycle_node: the group stopped, the pending restart kept, the cut;
        the service's own node: its power goes (PowerGone); else the group started again."""
        from sparkrack.watchdog.cyclebook import Pending
        from sparkrack.watchdog.nodecycle import Cycled

        self.cycles.append(node)
        if not self.cycle_ok:
            return Cycled(False, f"{node}: power cycle failed: the PDU refused")
        self.current = None  # as `down` leaves the records before the cut
        pending = Pending(node, cause, "record-1", "boot-1", time.time(), time.time(), 10,
                          "pdu:3", deployment.engine, deployment.profile,
                          deployment.deployment_id)
        keep(pending)
        self.kept.append(pending)
        if node == own:
            raise PowerGone(node)
        return self._started_again(deployment.deployment_id,
                                   f"{node}: back, cap unit active this boot, burn ok")

    def finish_cycle(self, pending, own):
        self.finished.append(pending.node)
        return self._started_again(pending.deployment,
                                   f"{pending.node}: back, cap unit active this boot, burn ok")

    def _started_again(self, deployment_id: str, line: str):
        from sparkrack.watchdog.nodecycle import Cycled

        self.restarts.append(deployment_id)
        if self.restart_error:
            return Cycled(False, f"{line}; the start after it failed: {self.restart_error}",
                          cut=True, started=False)
        new = self._new_deployment(deployment_id)
        return Cycled(True, f"{line}; sglang 512k started again in order", cut=True,
                      restarted=new.deployment_id, started=True)

    def _new_deployment(self, deployment_id: str):
        new = globals()["deployment"](deployment_id + "-again")
        self.current = self.last_good = new
        self.containers = ranks_of(new.deployment_id)
        self.polls = [latched_poll(new.deployment_id)] if self.relatch else []
        return new

    def record_action(self, deployment, poll, acted):
        self.actions.append((deployment.deployment_id, acted, poll.failure))
        return []

    def records(self):
        if self.records_error:
            raise SparkrackError("could not read the deployment records on spark-01: lost")
        return {"current": self.current, "last-good": self.last_good}

    def ranks(self):
        return list(self.containers), {}

    def group_watch(self, ranks, deployment):
        self.groups.append(FakeGroup(list(self.polls) or [healthy(deployment.deployment_id)],
                                     ranks=list(ranks)))
        return self.groups[-1]

    def facts(self):
        return {name: NodeFacts(boot_id="b", gpu=GpuFacts(sm_mhz=2190, power_w=90.0),
                                mem_total_kb=128 << 20, mem_available_kb=100 << 20,
                                clock_cap=UnitFacts("loaded", "active", "exited", "success"),
                                burn={"boot_id": "b", "ok": True, "time": 1.7e9})
                for name in NAMES}

    def stop_left_behind(self, ranks):
        back = [r for r in ranks if r.node not in self.still_lost]
        self.stopped_left.extend(back)
        return back, {r.node: "no answer" for r in ranks if r.node in self.still_lost}

    def restart(self, deployment):
        self.restarts.append(deployment.deployment_id)
        if self.restart_error:
            raise self.restart_error
        self._new_deployment(deployment.deployment_id)

    def lock_holder(self):
        return self.holder


def metric(watchdog: Watchdog, name: str, **labels) -> float | None:
    text = generate_latest(watchdog.metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def broken(deployment_id: str, why="rank 2 on spark-03 exited (exit code 1)") -> Poll:
    return Poll(failure=why, states=ranks_of(deployment_id, {"spark-03": "exited"}),
                detected=time.monotonic())


def make(rack: FakeRack, tmp_path: Path | None = None, *, allow_power_cycle: bool = False,
         node: str | None = "spark-01", keeps: str | None = None, **rack_vars) -> Watchdog:
    """The service on node (spark-01, the head, by default) guarding rack; keeps: why it
    would not finish a cycle of its own node (None: it would)."""
    inventory = rack_inventory(**rack_vars)
    return Watchdog(inventory, rack, WatchdogMetrics(),
                    state_file=tmp_path / "state.json" if tmp_path else None,
                    allow_power_cycle=allow_power_cycle, node=node, keeps=lambda: keeps)


def guarded(polls: list[Poll], tmp_path: Path | None = None, **options
            ) -> tuple[FakeRack, Watchdog]:
    """A ready deployment d1 polled as polls say: the rack, and its watchdog (make's
    options) after the first step (guarding)."""
    current = deployment("d1")
    rack = FakeRack(current=current, last_good=current, containers=ranks_of("d1"), polls=polls)
    watchdog = make(rack, tmp_path, **options)
    assert watchdog.step().verdict == "guarding"
    return rack, watchdog


LATCHED = GpuSample(100, 10.8, 670, 40, 55, 0x0)  # 670 MHz at 10.8 W busy, no heat


def latched_poll(deployment_id: str, node: str = "spark-03", sample: GpuSample = LATCHED,
                 thermal: Thermal | None = None) -> Poll:
    """A busy group whose node's GPU reads as sample: latched by default (670 MHz at 10.8 W
    under load, nothing thermal reported)."""
    return Poll(memory={n: (128 << 20, 100 << 20) for n in NAMES},
                states=ranks_of(deployment_id), head_status=200, gpus={node: sample},
                findings=judge(node, NAMES.index(node), sample, 2200, thermal))
