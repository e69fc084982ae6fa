"""`invoke status`: one row per node from one facts round trip plus the node's engine containers."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from .errors import SparkrackError
from .facts import NodeFacts, facts_argv, parse_facts
from .fleet import Fleet
from .inventory import Inventory, Node

ENGINE_LABEL = "sparkrack.engine"
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
    engine: str | None

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
    burn = facts.burn
    if not burn:
        return f"{unit_word}, never burned"
    if burn.get("boot_id") != facts.boot_id:
        return f"{unit_word}, burn before reboot"
    when = time.strftime("%H:%M", time.localtime(burn.get("time", 0)))
    verdict = "verified" if burn.get("ok") else f"FAILED ({burn.get('reason', '?')})"
    return f"{unit_word}, {verdict} {when}"


def engine_summary(fleet: Fleet, node: Node) -> str | None:
    """The node's sparkrack engine container(s): name, status and health (docker API)."""
    containers = fleet.docker_client(node).containers.list(all=True, filters={"label": ENGINE_LABEL})
    if not containers:
        return None
    parts = []
    for c in containers:
        health = c.attrs.get("State", {}).get("Health", {}).get("Status")
        parts.append(f"{c.name} {c.status}" + (f" ({health})" if health else ""))
    return ", ".join(parts)


def deployment_records(inventory: Inventory) -> dict[str, dict | None]:
    """The current and last known-good deployments recorded on the head ({} if unreadable)."""
    from .lifecycle import record

    with Fleet(inventory, [inventory.head]) as fleet:
        try:
            found = record.read(fleet, inventory)
        except SparkrackError:
            return {}
    return {kind: asdict(dep) if dep else None for kind, dep in found.items()}


def gather_status(inventory: Inventory, limit: str | None = None) -> list[StatusRow]:
    """Facts from every selected node in parallel; an unreachable node is a row, not an error."""
    nodes = inventory.select(limit)
    rows: list[StatusRow] = []
    with Fleet(inventory, nodes) as fleet:
        results = fleet.run(facts_argv(), timeout=STATUS_TIMEOUT)
        reachable = [inventory.node(r.node) for r in results if r.status == "ok"]

        def engines(node: Node) -> tuple[str, str | None]:
            try:
                return node.name, engine_summary(fleet, node)
            except Exception as exc:  # docker down on that node: show it, keep the row
                return node.name, f"docker: {(str(exc).splitlines() or [type(exc).__name__])[0][:80]}"

        with ThreadPoolExecutor(max_workers=len(reachable) or 1) as pool:
            engine_by_node = dict(pool.map(engines, reachable))
        for result in results:
            node = inventory.node(result.node)
            facts = parse_facts(result.stdout) if result.status == "ok" else None
            rows.append(StatusRow(
                node=node.name, rank=node.rank, address=node.address,
                reachable=result.status, error=result.error, seconds=round(result.duration, 2),
                facts=facts, cap_state=cap_state(facts) if facts else "-",
                engine=engine_by_node.get(node.name)))
    return sorted(rows, key=lambda r: r.rank)
