"""Power-safe reboots (`restart-rack`, `reboot`): nodes in batches, each batch verified
(back, capped, not latched) before the next one goes down, the head's lease on the lock
held while it reboots (docs/engines.md#power).
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments.record import Deployment, records_of
from sparkrack.deployments.running import running
from sparkrack.facts import node as node_facts
from sparkrack.facts import records as record_facts
from sparkrack.facts.node import CLOCK_CAP_UNIT, facts_argv, parse_facts
from sparkrack.facts.queries import answer, argv
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node
from sparkrack.lifecycle.lanes import Refused, down, up
from sparkrack.oplock.audit import note
from sparkrack.oplock.lock import lease_while_down
from sparkrack.safety import gateburn
from sparkrack.safety.stripcheck import measured_strip

# reboot after the SSH command returned, so the caller sees a clean exit
REBOOT_ARGV = ["systemd-run", "--no-block", "--on-active=1s", "--unit=sparkrack-reboot",
               "/bin/systemctl", "reboot"]
NODE_TIMEOUT = 300.0


@dataclass
class NodeReboot:
    """One node's reboot: when it was asked to go down and when it was verified back."""

    node: str
    requested: float
    back: float | None = None
    verdict: str = "pending"


@dataclass
class RebootReport:
    """Every node's reboot, batch by batch."""

    batches: list[list[NodeReboot]] = field(default_factory=list)
    records: dict[str, Deployment | None] = field(default_factory=dict)  # the head's, by kind


class RebootStopped(SparkrackError):
    """The sequence stopped at a batch; the message names the node and why."""


def batches_of(nodes: Sequence[Node], size: int) -> list[list[Node]]:
    """Workers first (highest rank first), the head in the last batch."""
    ordered = sorted(nodes, key=lambda n: (n.rank == 0, -n.rank))
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def boot_ids(fleet: Fleet, nodes: Sequence[Node], head: str
             ) -> tuple[dict[str, str], dict[str, Deployment | None]]:
    """Current boot id per node (a node that does not answer is an error), from the node
    facts; and the head's deployment records when it is among nodes ({} otherwise), in its
    same round trip."""
    asked = {n.name: node_facts.queries() + (record_facts.queries() if n.name == head else [])
             for n in nodes}
    result = fleet.run({name: argv(queries) for name, queries in asked.items()}, timeout=10)
    lost = [f"{r.node}: {r.error}" for r in result if r.status != "ok"]
    if lost:
        raise RebootStopped("cannot reboot a node that does not answer: " + "; ".join(lost))
    answers = {r.node: answer(r.stdout, asked[r.node]) for r in result}
    ids = {name: node_facts.facts_of(found).boot_id for name, found in answers.items()}
    return ids, records_of(answers[head]) if head in answers else {}


def wait_back(fleet: Fleet, nodes: Sequence[Node], before: dict[str, str], timeout: float,
              on_event: Callable[[str], None]) -> dict[str, float]:
    """Wait until every node answers with a new boot id and the cap unit succeeded this
    boot; {node: time verified}. RebootStopped naming the nodes that did not come back."""
    deadline = time.monotonic() + timeout
    back: dict[str, float] = {}
    last: dict[str, str] = {}
    while len(back) < len(nodes):
        pending = [n for n in nodes if n.name not in back]
        for result in fleet.run({n.name: facts_argv() for n in pending}, timeout=10):
            if result.status != "ok":
                if last.get(result.node) != "not answering":
                    on_event(f"{result.node}: not answering (rebooting)")
                last[result.node] = "not answering"
                continue
            facts = parse_facts(result.stdout)
            unit = facts.clock_cap
            if facts.boot_id == before[result.node]:
                last[result.node] = "not rebooted yet"
            elif unit.active != "active" or unit.result != "success":
                last[result.node] = f"{CLOCK_CAP_UNIT} {unit.active}/{unit.result or 'none'}"
                if unit.active == "failed":
                    raise RebootStopped(f"{result.node}: {CLOCK_CAP_UNIT} failed after the reboot: "
                                        "the GPU is not capped", fix="journalctl -u "
                                        f"{CLOCK_CAP_UNIT} on the node; invoke provision --role clock_cap")
            else:
                back[result.node] = time.time()
                on_event(f"{result.node}: back, cap unit active this boot")
        if len(back) < len(nodes) and time.monotonic() > deadline:
            missing = "; ".join(f"{n.name} ({last.get(n.name, 'no answer')})" for n in nodes
                                if n.name not in back)
            raise RebootStopped(f"not back within {timeout:.0f} s: {missing}; the sequence stops here")
        if len(back) < len(nodes):
            time.sleep(1.0)
    return back


def reboot_nodes(inventory: Inventory, nodes: Sequence[Node], *, batch_size: int,
                 timeout: float = NODE_TIMEOUT,
                 on_event: Callable[[str], None] = lambda e: None) -> RebootReport:
    """Reboot nodes batch by batch; each batch verified (back, cap unit, burn) before the next."""
    if batch_size < 1:
        raise SparkrackError(f"batch size {batch_size} must be at least 1")
    report = RebootReport()
    with Fleet(inventory, nodes) as fleet:
        for number, batch in enumerate(batches_of(nodes, batch_size), 1):
            names = ", ".join(n.name for n in batch)
            before, records = boot_ids(fleet, batch, inventory.head.name)
            report.records.update(records)
            strip_before_batch(inventory, batch, number, on_event)
            on_event(f"batch {number}: rebooting {names}")
            with lease_while_down([n.name for n in batch], timeout + 60):
                requested = time.time()
                fleet.run({n.name: REBOOT_ARGV for n in batch}, timeout=10)
                note(nodes=[n.name for n in batch], rebooted=[n.name for n in batch])
                reboots = [NodeReboot(n.name, requested) for n in batch]
                report.batches.append(reboots)
                back = wait_back(fleet, batch, before, timeout, on_event)
            for burned in gateburn.gate_burn(inventory, batch):
                entry = next(r for r in reboots if r.node == burned.node)
                entry.back, entry.verdict = back[burned.node], burned.verdict
                if not burned.ok:
                    advice = ("needs a full power removal (unplug it, wait, plug it back)"
                              if burned.verdict == "LATCHED" else "the clock cap does not hold")
                    raise RebootStopped(f"batch {number}: {burned.node}: {burned.reason}; {advice}; "
                                        "the sequence stops here, later batches were not rebooted")
            on_event(f"batch {number}: {names} back and verified under load")
    return report


def strip_before_batch(inventory: Inventory, batch: Sequence[Node], number: int,
                       on_event: Callable[[str], None]) -> None:
    """With a PDU: RebootStopped when the strip's measured draw plus the batch's burn (its
    nodes at uncapped watts: a rebooted GPU is not verified capped until it burns) would
    pass the strip; said when the PDU does not answer."""
    worst = {node.name: inventory.vars.node_watts_uncapped for node in batch}
    check, unread = measured_strip(inventory, worst, f"batch {number}'s burn would add "
                                   "(uncapped until verified)")
    if unread:
        on_event(f"batch {number}: strip not measured: {unread}")
    if check is not None and check.blocking:
        raise RebootStopped(f"batch {number}: {check.reason}: not rebooted, nor any batch "
                            "after it", fix="find what else draws on the strip (`invoke "
                            "power`), or reboot fewer nodes at once (--batch-size)")


def restart_rack(inventory: Inventory, *, batch_size: int | None = None,
                 bring_back: bool = False,
                 on_event: Callable[[str], None] = lambda e: None) -> RebootReport:
    """Stop the engine in order, reboot every node in verified batches, and optionally bring
    the last known-good deployment back (its record read in the head's boot-id round trip,
    before the head reboots). Returns the RebootReport."""
    stopped = down(inventory, on_event=on_event)
    if stopped.errors:
        raise SparkrackError("could not stop the engine cleanly: " + "; ".join(
            f"{k}: {v}" for k, v in stopped.errors.items()), fix="fix the nodes named, then retry")
    report = reboot_nodes(inventory, inventory.nodes, on_event=on_event,
                          batch_size=batch_size or inventory.vars.restart_batch_size)
    if bring_back:
        last = report.records.get("last-good")
        if last is None:
            on_event("no last known-good deployment to bring back")
        else:
            on_event(f"bringing back {last.describe()}")
            up(inventory, last.engine, last.profile, on_event=on_event)
    return report


def reboot(inventory: Inventory, nodes: Sequence[Node], *, batch_size: int | None = None,
           on_event: Callable[[str], None] = lambda e: None) -> RebootReport:
    """Reboot some nodes in verified batches; refused while an engine runs on any of them."""
    with Fleet(inventory, nodes) as fleet:
        alive = running(fleet).alive
    if alive:
        raise Refused(f"{alive[0].engine} {alive[0].profile} runs on {alive[0].node} (rank "
                      f"{alive[0].rank}): rebooting it would take the TP group down",
                      fix="run `invoke down` first, or `invoke restart-rack` for the whole rack")
    return reboot_nodes(inventory, nodes, on_event=on_event,
                        batch_size=batch_size or inventory.vars.restart_batch_size)
