"""Provisioning's questions in one round trip: files, units, HCAs, guard commands, images,
netdevs, netplan's files (each kind's query and parser lives with its topic: files.py,
systemd.py, roce.py, docker.py, netplan.py; GUARD's here); `facts_of` gathers the answers
into `ProvisionFacts` for the plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkrack.facts.docker import IMAGES
from sparkrack.facts.files import FILE, FileFacts
from sparkrack.facts.netplan import NETPLAN, NetplanFile, problem, renderer_for
from sparkrack.facts.queries import Answers, Fact, Query, answer
from sparkrack.facts.roce import (
    FUNCTIONS,
    HCA,
    NETDEVS,
    Function,
    RoceFacts,
    cabling_hint,
    netdev_down,
)
from sparkrack.facts.systemd import UNIT, UnitFacts
from sparkrack.remote.gather import guard_section


def parse_guard(lines: list[str]) -> tuple[int, str]:
    """One `guard_section`'s lines: (its exit code, 255 when unknown; what it said last when
    it does not hold)."""
    rc = next((line[3:] for line in lines if line.startswith("rc ")), "")
    why = next((line[4:] for line in lines if line.startswith("why ")), "")
    return int(rc) if rc.isdigit() else 255, why


GUARD = Fact(guard_section, parse_guard)


def guard_query(argv: Iterable[str]) -> Query:
    """The exit code of a guard command."""
    value = tuple(argv)
    return GUARD.query(value, value=value)


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
    guards = answers.each(GUARD)
    images, images_error = answers.found(IMAGES, (None, None))
    return ProvisionFacts(
        boot_id=answers.boot_id, now=answers.now,
        files={path: facts for (path,), facts in answers.each(FILE).items()},
        units={name: facts for (name,), facts in answers.each(UNIT).items()},
        roce=RoceFacts({name: facts for (name,), facts in answers.each(HCA).items()}),
        guards={argv: rc for argv, (rc, _) in guards.items()},
        guard_reasons={argv: why for argv, (_, why) in guards.items() if why},
        images=images, images_error=images_error, netdevs=answers.found(NETDEVS, ()),
        functions=answers.found(FUNCTIONS, {}), netplan=answers.found(NETPLAN))
