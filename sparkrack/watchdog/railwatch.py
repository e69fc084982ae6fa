"""What each rank's NCCL uses while its deployment is current (docs/watchdog.md#nccl-rails):
the head's NCCL record of the last start (what each rank's NCCL said at init) and the port
of every HCA of each node's nccl_ib_hca, read every facts poll in one round trip. Exported
as metrics (rails in use against nccl_ib_hca, TCP, each port's state); a port that goes
down under a rank's NCCL while the group is guarded is a finding naming the node, the HCA
and what NCCL does now. NCCL 2.27.7 only warns of a port error (net_ib.cc's async thread):
its connections on that rail fail once the HCA's retries are spent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sparkrack.core.errors import SparkrackError
from sparkrack.facts import records as record_facts
from sparkrack.facts.queries import Answers, Query
from sparkrack.facts.roce import ACTIVE, roce_query
from sparkrack.inventory import Inventory
from sparkrack.logs.nccluse import IB_RETRY_CNT, IB_TIMEOUT, RETRY_WINDOW_S

log = logging.getLogger("sparkrack.watchdog")

RAILS_EVERY_S = 5.0  # between reads of the record and the ports (as the node facts)


@dataclass(frozen=True)
class RankRails:
    """One rank's NCCL as its last start found it, and the ports of its node now."""

    rank: int
    node: str
    network: str  # IB | Socket
    used: tuple[str, ...]  # the HCAs NCCL said it uses ("rocep1s0f0"), none on Socket
    expected: tuple[str, ...]  # the node's nccl_ib_hca
    ports: Mapping[str, str]  # HCA of nccl_ib_hca -> its port state now ('' missing)

    @property
    def down(self) -> list[str]:
        """The HCAs NCCL uses whose port is not ACTIVE now (went down since the start)."""
        return [h for h in self.used if h in self.ports and self.ports[h] != ACTIVE]

    @property
    def rails(self) -> int:
        """The rails NCCL runs on now: those it said at init whose port is still up."""
        return len(self.used) - len(self.down)


def queries(inventory: Inventory) -> dict[str, list[Query]]:
    """What one round trip asks: the head its NCCL record, every node the HCAs of its
    nccl_ib_hca."""
    asked = {node.name: [roce_query(hca) for hca in node.vars.nccl_ib_hca]
             for node in inventory.nodes}
    asked[inventory.head.name].append(record_facts.nccl_query())
    return asked


def rank_rails(inventory: Inventory, answers: Mapping[str, Answers | None],
               deployment_id: str) -> list[RankRails]:
    """Each rank of deployment_id whose NCCL said its network at init, with its node's
    ports as this round trip read them (none: the head did not answer, or its record is of
    another start)."""
    head = answers.get(inventory.head.name)
    record = record_facts.nccl_of(head) if head is not None else None
    if not record or record.get("deployment") != deployment_id:
        return []
    found = []
    for entry in record.get("ranks") or []:
        if not isinstance(entry, dict) or not entry.get("said"):
            continue
        node = next((n for n in inventory.nodes if n.name == entry.get("node")), None)
        if node is None:
            continue
        network, used = _network(entry)
        mine = answers.get(node.name)
        ports = {} if mine is None else {hca: _state(mine, hca) for hca in node.vars.nccl_ib_hca}
        found.append(RankRails(int(entry.get("rank", node.rank)), node.name, network, used,
                               tuple(node.vars.nccl_ib_hca), ports))
    return found


def _state(answers: Answers, hca: str) -> str:
    """An HCA's port state as a round trip read it ('' when the node has no such device)."""
    found = answers.get(roce_query(hca))
    return found.state if found.present else ""


def _network(entry: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(network, HCAs) of a record's rank: its fields, or its `uses` text (a record written
    before they were: 'NET/IB on rocep1s0f0:1, roceP2p1s0f0:1')."""
    uses = str(entry.get("uses", ""))
    network = entry.get("network") or ("IB" if uses.startswith("NET/IB") else "Socket")
    hcas = entry.get("hcas")
    if hcas is None:
        hcas = uses.removeprefix("NET/IB on ").split(", ") if network == "IB" else []
    return str(network), tuple(str(h).split(":")[0] for h in hcas if h)


def port_down_line(rails: RankRails, hca: str) -> str:
    """The finding of a port gone down under a rank's NCCL: node, HCA, what NCCL does now."""
    state = rails.ports.get(hca) or "no such device any more"
    left = [h for h in rails.used if h not in rails.down]
    after = (f"on {len(left)} of {len(rails.expected)} rails ({', '.join(left)})" if left
             else "over TCP (NET/Socket)")
    return (f"{rails.node}: {hca}'s port went down ({state}) under rank {rails.rank}'s NCCL: "
            f"NCCL 2.27.7 only warns (`NET/IB : {hca}:1 Got async error event: port error`); "
            f"its connections on that rail fail once the HCA's retries are spent (about "
            f"{RETRY_WINDOW_S:.0f} s at NCCL_IB_TIMEOUT {IB_TIMEOUT}, NCCL_IB_RETRY_CNT "
            f"{IB_RETRY_CNT}) and the group with them; started again, NCCL runs {after}, "
            f"which `invoke up` refuses without --allow-degraded: reseat the cable (`invoke "
            f"run --limit {rails.node} -- ibdev2netdev` shows the ports)")


class RailWatch:
    """The latest reading, the findings said (until they clear), and their metrics."""

    def __init__(self, inventory: Inventory, every: float = RAILS_EVERY_S):
        self.inventory = inventory
        self.every = every
        self.ranks: list[RankRails] = []
        self.read_at: float | None = None
        self.deployment: str | None = None
        self.standing: set[tuple[str, str]] = set()  # (node, HCA) said down
        self._lock = threading.Lock()

    def poll(self, rack: Any, current: Any, guarding: bool, now: float) -> list[str]:
        """Read again when due (rack.ask: one round trip); the findings said now (a port
        gone down under a rank's NCCL while guarding, and one back up)."""
        ask: Callable | None = getattr(rack, "ask", None)
        deployment = getattr(current, "deployment_id", None)
        if deployment is None or ask is None:
            self._set([], None)
            return []
        if deployment != self.deployment or self.read_at is None or \
                now - self.read_at >= self.every:
            try:
                answers = ask(queries(self.inventory))
            except SparkrackError as error:  # the last reading stands; guarding goes on
                log.warning("NCCL rails not read: %s", error.line())
                answers = None
            if answers is not None:
                self._set(rank_rails(self.inventory, answers, deployment), deployment)
            self.read_at = now
        return self._findings(guarding)

    def _set(self, ranks: list[RankRails], deployment: str | None) -> None:
        with self._lock:
            self.ranks, self.deployment = ranks, deployment
        if deployment is None:
            self.read_at = None
            self.standing = set()

    def _findings(self, guarding: bool) -> list[str]:
        said = []
        down = {(r.node, hca): r for r in self.ranks for hca in r.down}
        if guarding:
            for key in sorted(set(down) - self.standing):
                line = port_down_line(down[key], key[1])
                log.warning("%s", line)
                said.append(line)
        for node, hca in sorted(self.standing - set(down)):
            line = f"{node}: {hca}'s port is up again"
            log.info("%s", line)
            said.append(line)
        self.standing = set(down) if guarding else self.standing & set(down)
        return said


class RailCollector(Collector):
    """RailWatch's reading as gauge families at scrape time (absent while no deployment is
    current, or its ranks' NCCL said nothing)."""

    def __init__(self, watch: RailWatch):
        self.watch = watch

    def describe(self) -> list:
        return list(self.collect())

    def collect(self) -> Iterator:
        with self.watch._lock:
            ranks = list(self.watch.ranks)
        labels = ["node", "rank"]
        rails = GaugeMetricFamily("sparkrack_nccl_rails", "Rails the rank's NCCL runs on now: "
                                  "the HCAs it said at init whose port is still up (0 on "
                                  "NET/Socket)", labels=labels)
        expected = GaugeMetricFamily("sparkrack_nccl_expected_rails", "HCAs the inventory "
                                     "gives the rank's node (nccl_ib_hca)", labels=labels)
        socket = GaugeMetricFamily("sparkrack_nccl_socket", "1 while the rank's NCCL runs "
                                   "NET/Socket (TCP): no HCA of nccl_ib_hca was usable at init",
                                   labels=labels)
        ports = GaugeMetricFamily("sparkrack_nccl_port_up", "1 while the port of an HCA of "
                                  "the node's nccl_ib_hca is ACTIVE (0: down or no such device)",
                                  labels=["node", "hca"])
        for r in ranks:
            rails.add_metric([r.node, str(r.rank)], float(r.rails))
            expected.add_metric([r.node, str(r.rank)], float(len(r.expected)))
            socket.add_metric([r.node, str(r.rank)], float(r.network == "Socket"))
            for hca, state in r.ports.items():
                ports.add_metric([r.node, hca], float(state == ACTIVE))
        yield from (rails, expected, socket, ports)
