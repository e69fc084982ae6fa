"""`invoke status`: one row per node from one facts round trip plus the node's engine
containers; the head's deployment records and each node's nccl_ib_hca ports come in the
same round trip. The table's two shapes (narrow for a terminal, wide for --wide and pipes)
and what differs between nodes are status.view's."""

import time
from dataclasses import asdict, dataclass

from sparkrack.facts import node as node_facts
from sparkrack.facts import records as record_facts
from sparkrack.facts.node import NodeFacts, burn_this_boot
from sparkrack.facts.queries import Answers, answer, argv
from sparkrack.facts.roce import roce_query
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory

STATUS_TIMEOUT = 15.0  # seconds for the facts command: status must answer even when a node is stuck


@dataclass
class StatusRow:
    """What `status` knows about one node."""

    node: str
    rank: int
    address: str
    reachable: str  # ok | unreachable | failed
    error: str | None
    seconds: float
    facts: NodeFacts | None
    cap_state: str
    engine: str | None  # each engine container: its name, status and health
    engine_brief: str | None = None  # the same in a few words: engine, status or health
    ports: dict[str, str] | None = None  # HCA of nccl_ib_hca -> its port state ('' missing)

    def as_dict(self) -> dict:
        """Plain data for --json."""
        return asdict(self)


def cap_state(facts: NodeFacts) -> str:
    """The clock cap in one word: the unit's result this boot and the last burn verdict."""
    unit = facts.clock_cap
    if unit.load == "not-found":
        unit_word = "no unit"
    elif unit.active == "active" and unit.result == "success":
        unit_word = "unit ok"
    else:
        unit_word = f"unit {unit.active}/{unit.result or '?'}"
    if not facts.burn:
        return f"{unit_word}, never burned"
    burn = burn_this_boot(facts)
    if burn is None:
        return f"{unit_word}, burn before reboot"
    when = time.strftime("%H:%M", time.localtime(burn.get("time", 0)))
    verdict = "verified" if burn.get("ok") else f"FAILED ({burn.get('reason', '?')})"
    return f"{unit_word}, {verdict} {when}"


def engine_summary(ranks) -> str | None:
    """A node's sparkrack engine container(s) (lifecycle Ranks): name, status and health."""
    return ", ".join(f"{r.name} {r.status}" + (f" ({r.health})" if r.health else "")
                     for r in ranks) or None


def engine_brief(ranks, rank: int) -> str | None:
    """engine_summary in a few words: `sglang healthy`, `vllm exited`; a container of
    another rank than the node's (rank) shows its number: `sglang r3 running`."""
    return ", ".join(f"{r.engine}{'' if r.rank == rank else f' r{r.rank}'} "
                     f"{r.health if r.health and r.status == 'running' else r.status}"
                     for r in ranks) or None


def ports_of(answers: Answers, hcas) -> dict[str, str]:
    """Each HCA of nccl_ib_hca's port state as the round trip read it ('' no such device)."""
    found = {hca: answers.get(roce_query(hca)) for hca in hcas}
    return {hca: hca_facts.state if hca_facts.present else "" for hca, hca_facts in found.items()}


def gather_status(inventory: Inventory, limit: str | None = None) -> list[StatusRow]:
    """Facts from every selected node in parallel; an unreachable node is a row, not an error."""
    return rack_status(inventory, limit)[0]


def rack_status(inventory: Inventory, limit: str | None = None
                ) -> tuple[list[StatusRow], dict[str, dict | None]]:
    """(gather_status's rows, the current / last-good / failed deployment records, the
    watchdog's last power cycle (`power-cycle`) and the last start's NCCL record (`nccl`)
    as plain data): the head, when selected, is
    asked for them in its one round trip ({} when it did not answer or was not selected)."""
    from sparkrack.deployments.record import records_of
    from sparkrack.deployments.running import running

    nodes = inventory.select(limit)
    head = record_facts.queries() + [record_facts.power_cycle_query(),
                                     record_facts.nccl_query()]
    asked = {node.name: node_facts.queries() + [roce_query(h) for h in node.vars.nccl_ib_hca]
             + (head if node.name == inventory.head.name else []) for node in nodes}
    rows: list[StatusRow] = []
    records: dict[str, dict | None] = {}
    with Fleet(inventory, nodes) as fleet:
        results = fleet.run({name: argv(queries) for name, queries in asked.items()},
                            timeout=STATUS_TIMEOUT)
        reachable = [inventory.node(r.node) for r in results if r.status == "ok"]

        found = running(fleet, reachable)  # docker down on a node: shown, the row kept
        engine_by_node = {node.name: f"docker: {found.errors[node.name][:80]}"
                          if node.name in found.errors else
                          engine_summary(r for r in found.ranks if r.node == node.name)
                          for node in reachable}
        brief_by_node = {node.name: "docker error" if node.name in found.errors else
                         engine_brief((r for r in found.ranks if r.node == node.name), node.rank)
                         for node in reachable}
        for result in results:
            node = inventory.node(result.node)
            answers = answer(result.stdout, asked[node.name]) if result.status == "ok" else None
            facts = node_facts.facts_of(answers) if answers is not None else None
            if answers is not None and node.name == inventory.head.name:
                records = {kind: asdict(dep) if dep else None
                           for kind, dep in records_of(answers).items()}
                records[record_facts.POWER_CYCLE] = record_facts.power_cycle_of(answers)
                records[record_facts.NCCL] = record_facts.nccl_of(answers)
            rows.append(StatusRow(
                node=node.name, rank=node.rank, address=node.address,
                reachable=result.status, error=result.error, seconds=round(result.duration, 2),
                facts=facts, cap_state=cap_state(facts) if facts else "-",
                engine=engine_by_node.get(node.name),
                engine_brief=brief_by_node.get(node.name),
                ports=ports_of(answers, node.vars.nccl_ib_hca) if answers is not None else None))
    return sorted(rows, key=lambda r: r.rank), records
