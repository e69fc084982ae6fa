"""`invoke fabric.check`: every cabled rail, a full-size frame (fabric_mtu) and a short
burst each way; an HCA of nccl_ib_hca whose port is down, or that is no device, is named
first: it carries none of its share.

Two round trips learn each node's rails (which RoCE functions are up, their netdevs'
addresses and MTU, the rate each link negotiated: the facts queries); then every node
listens on its rails' addresses (remote/rails.py `serve`, until the check closes its
stdin) while every node
sends (`send`) a full-size frame to every other node's rail on the subnet, then a burst to
its downstream neighbour on each rail: all links carry a stream each way at once, as a TP
ring does. The token that marks our datagrams and streams goes on stdin. What the figures
say is verdicts.py's; on the rehearsal rack, whose links run at a thousandth of their rate
(Inventory.link_scale), a measured rate is judged as the link rate it stands for.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from sparkrack import remote
from sparkrack.facts.onboard import links_query
from sparkrack.facts.queries import answer
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.facts.roce import FUNCTIONS, roce_query
from sparkrack.fleet import Fleet, NodeResult
from sparkrack.fleet.results import last_json_object
from sparkrack.inventory import Inventory
from sparkrack.rails.verdicts import (
    Measured,
    Pair,
    Rail,
    idle_rails,
    judge,
    pairs,
    rails_of,
)
from sparkrack.remote.rails import JUMBO_WAIT, LISTENER

RAIL_PORT = 29471  # UDP echo and TCP sink of the check, on each rail's address
PYTHON = "/usr/bin/python3"


@dataclass
class FabricReport:
    """The rails found, what each burst gave, and the problems (empty: the fabric is fit)."""

    rails: dict[str, list[Rail]] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    scale: float = 1.0  # link Gbit/s per measured Gbit/s (the rehearsal's pace)
    mtu: int = 9000  # the full-size frame: fabric_mtu

    def link_gbit_s(self, m: Measured) -> float:
        """What a burst's rate stands for on the link (the measured rate on a real rack)."""
        return m.gbit_s * self.scale

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"ok": self.ok, "problems": self.problems,
                "rails": [{"src": m.pair.src.node, "dst": m.pair.dst.node,
                           "netdev": m.pair.src.netdev, "hca": m.pair.src.hca,
                           "negotiated_gbit": m.pair.src.negotiated_gbit,
                           "jumbo": m.jumbo, "gbit_s": round(m.gbit_s, 3),
                           "link_gbit_s": round(self.link_gbit_s(m), 1),
                           "error": m.error} for m in self.measured]}


def check_fabric(inventory: Inventory, *, seconds: float = 1.0, port: int = RAIL_PORT,
                 fleet: Fleet | None = None) -> FabricReport:
    """Measure every rail of the inventory's nodes (see the module doc); over fleet when
    given (the gates' own), else over a fleet of its own."""
    if fleet is None:
        with Fleet(inventory) as own:
            return check_fabric(inventory, seconds=seconds, port=port, fleet=own)
    report = FabricReport(scale=inventory.link_scale, mtu=inventory.vars.fabric_mtu)
    nodes = list(inventory.nodes)
    report.rails = _rails(fleet, nodes, report.problems)  # names the idle rails first
    found, unmeasured = pairs([n.name for n in nodes], report.rails)
    report.problems += unmeasured
    if found:
        report.measured = _bursts(fleet, found, seconds, port, report.mtu, report.problems)
    report.problems += judge(report.measured, link_gbit=inventory.vars.fabric_link_gbit,
                             scale=report.scale, mtu=report.mtu)
    return report


def _rails(fleet: Fleet, nodes, problems: list[str]) -> dict[str, list[Rail]]:
    """Each answering node's rails (two round trips: its functions, then their links and
    HCAs)."""
    functions = {}
    wanted = {n.name: n.vars.nccl_ib_hca for n in nodes}
    for result in fleet.run({n.name: gather_argv([FUNCTIONS]) for n in nodes}, timeout=20):
        if not result.ok:
            problems.append(f"{result.node}: {result.error}")
            continue
        functions[result.node] = answer(result.stdout, [FUNCTIONS]).get(FUNCTIONS)
        problems += idle_rails(result.node, wanted[result.node], functions[result.node])
    queries = {name: [links_query(up, []), *map(roce_query, up)] for name, found in
               functions.items() for up in [[f for f in found if found[f].up]]}
    rails = {}
    for result in fleet.run({name: gather_argv(q) for name, q in queries.items()}, timeout=20):
        if not result.ok:
            problems.append(f"{result.node}: {result.error}")
            continue
        answers = answer(result.stdout, queries[result.node])
        links, *hcas = queries[result.node]
        rates = {q.value[0]: answers.get(q).rate for q in hcas}
        rails[result.node] = rails_of(result.node, functions[result.node],
                                      answers.get(links), rates)
    return rails


def _bursts(fleet: Fleet, found: list[Pair], seconds: float, port: int, mtu: int,
            problems: list[str]) -> list[Measured]:
    """Listen on every receiving address until every sender is done; send on every rail at
    once; what each gave."""
    token = secrets.token_hex(16).encode() + b"\n"
    reach_wait = LISTENER + JUMBO_WAIT * (1 + max(len(p.others) for p in found))
    hold = reach_wait + (seconds + JUMBO_WAIT) * len(found) + 20  # the listeners' bound
    receivers: dict[str, set[str]] = {}
    senders: dict[str, list[str]] = {}
    for pair in found:
        for rail in (pair.dst, *pair.others):
            receivers.setdefault(rail.node, set()).add(rail.ipv4)
        senders.setdefault(pair.src.node, []).extend(
            [pair.src.ipv4, pair.dst.ipv4, ",".join(r.ipv4 for r in pair.others) or "-"])
    heard: dict[str, NodeResult] = {}
    senders_done = threading.Event()

    def until_done() -> Iterator[bytes]:
        yield token  # then stdin stays open: the listener ends when it closes
        senders_done.wait(hold)

    def serve(node: str, addrs: set[str]) -> None:
        heard[node] = fleet.stream(node, remote.argv(
            PYTHON, "rails", "serve", f"{hold:g}", str(port), *sorted(addrs)),
            until_done(), timeout=hold + 30)

    listeners = [threading.Thread(target=serve, args=item, name=f"rails-serve-{item[0]}",
                                  daemon=True) for item in receivers.items()]
    for listener in listeners:
        listener.start()
    try:
        sent = {result.node: result for result in fleet.run(
            {node: remote.argv(PYTHON, "rails", "send", f"{seconds:g}", str(port), str(mtu),
                               *args)
             for node, args in senders.items()}, timeout=hold + 30, stdin=token)}
    finally:
        senders_done.set()
    for listener in listeners:
        listener.join(timeout=hold + 40)
    for node, result in heard.items():
        for addr, entry in (last_json_object(result.stdout) or {}).items():
            if entry.get("error"):
                problems.append(f"{node}: listening on {addr}: {entry['error']}")
    measured = []
    for pair in found:
        result = sent.get(pair.src.node)
        entry = (last_json_object(result.stdout) or {}).get(pair.src.ipv4) if result else None
        if entry is None:
            why = result.error if result is not None else "no answer"
            measured.append(Measured(pair, error=f"the burst did not run: {why}"))
            continue
        measured.append(Measured(pair, entry.get("jumbo", ""), int(entry.get("bytes", 0)),
                                 float(entry.get("seconds", 0.0)), entry.get("error", ""),
                                 entry.get("reach", {})))
    return measured
