"""Provisioning's questions in one round trip: files, units, HCAs, guard commands, images,
netdevs, netplan's files (each kind's query and parser lives with its topic: files.py,
systemd.py, roce.py, docker.py, netplan.py); `parse_facts` turns the answers into
`ProvisionFacts` for the plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkrack.facts.docker import parse_images
from sparkrack.facts.files import FileFacts, parse_file
from sparkrack.facts.netplan import NetplanFile, parse_netplan, problem, renderer_for
from sparkrack.facts.queries import Answers, Query, answer
from sparkrack.facts.roce import (
    Function,
    HcaFacts,
    RoceFacts,
    cabling_hint,
    netdev_down,
    parse_functions,
    parse_hca,
    parse_netdevs,
)
from sparkrack.facts.systemd import UnitFacts, parse_unit


def guard_query(argv: Iterable[str]) -> Query:
    """The exit code of a guard command."""
    value = tuple(argv)
    return Query("guard", value, ("x", str(len(value)), *value))


@dataclass(frozen=True)
class ProvisionFacts:
    """Everything one gather round trip learned about a node."""

    boot_id: str = ""
    now: str = ""
    files: Mapping[str, FileFacts] = field(default_factory=dict)
    units: Mapping[str, UnitFacts] = field(default_factory=dict)
    roce: RoceFacts = field(default_factory=RoceFacts)
    guards: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    # what a guard that does not hold printed last (why the command is needed)
    guard_reasons: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    images: Mapping[str, str] | None = None  # ref -> image ID; None if not gathered
    images_error: str | None = None
    netdevs: tuple[str, ...] = ()
    functions: Mapping[str, Function] = field(default_factory=dict)  # every RDMA device
    netplan: tuple[NetplanFile, ...] | None = None  # netplan's files; None if not gathered

    def file(self, path: str) -> FileFacts:
        return self.files.get(path, FileFacts())

    def unit(self, name: str) -> UnitFacts:
        return self.units.get(name, UnitFacts())

    def cabling(self, node: str) -> str:
        """What is up on the node and the inventory values that would use it."""
        return cabling_hint(node, self.functions)

    def netdev_down(self, netdev: str) -> bool:
        """Whether netdev is a RoCE function's and that function's port is down."""
        return netdev_down(netdev, self.functions)

    def renderer(self, netdev: str, ours: str) -> str:
        """The daemon the netplan drop-in ours should leave netdev with ('' when netplan's
        files were not gathered)."""
        if self.netplan is None:
            return ""
        return renderer_for(self.netplan, self.units, netdev, ours).name

    def renderer_problem(self, netdevs: Iterable[str], ours: str) -> str:
        """Why that daemon would not bring these netdevs' config up, or not after a
        reboot, with the fix ('' when none)."""
        return problem(self.netplan, self.units, [n for n in netdevs if n], ours)


def parse_facts(text: str, queries: Iterable[Query]) -> ProvisionFacts:
    """The gather script's output for these queries -> ProvisionFacts."""
    return facts_of(answer(text, queries))


def facts_of(answers: Answers) -> ProvisionFacts:
    """Provisioning's facts from a round trip's answers (other kinds' are left out)."""
    files: dict[str, FileFacts] = {}
    units: dict[str, UnitFacts] = {}
    hcas: dict[str, HcaFacts] = {}
    guards: dict[tuple[str, ...], int] = {}
    guard_reasons: dict[tuple[str, ...], str] = {}
    images, images_error, netdevs, netplan = None, None, (), None
    functions: dict[str, Function] = {}
    for query in answers.index:
        lines = answers.lines(query)
        if query.kind == "file":
            files[query.value[0]] = parse_file(lines)
        elif query.kind == "unit":
            units[query.value[0]] = parse_unit(lines)
        elif query.kind == "roce":
            hcas[query.value[0]] = parse_hca(lines)
        elif query.kind == "guard":
            rc = next((line[3:] for line in lines if line.startswith("rc ")), "")
            guards[query.value] = int(rc) if rc.isdigit() else 255
            why = next((line[4:] for line in lines if line.startswith("why ")), "")
            if why:
                guard_reasons[query.value] = why
        elif query.kind == "images":
            images, images_error = parse_images(lines)
        elif query.kind == "netdevs":
            netdevs = parse_netdevs(lines)
        elif query.kind == "functions":
            functions = parse_functions(lines)
        elif query.kind == "netplan":
            netplan = parse_netplan(lines)
    return ProvisionFacts(
        boot_id=answers.boot_id, now=answers.now, files=files, units=units,
        roce=RoceFacts(hcas), guards=guards, guard_reasons=guard_reasons, images=images,
        images_error=images_error, netdevs=netdevs, functions=functions, netplan=netplan)
