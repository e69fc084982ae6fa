"""Onboarding's own questions: the docker daemon (version, runtimes, the NVIDIA hook on its
PATH: DOCKER, dockerd.py's `daemon_section`) and the RoCE / NCCL links (MTU, operstate, IPv4
of each netdev: LINKS, links.py's `links_section`). The other facts of the baseline are the
node facts and provisioning's HCA, netdev and image queries, asked in the same round trip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparkrack.facts.queries import Fact, Query
from sparkrack.remote.dockerd import daemon_section
from sparkrack.remote.links import links_section


def links_query(hcas: Iterable[str], devs: Iterable[str]) -> Query:
    """MTU, state and IPv4 of devs and of every netdev of the HCAs."""
    hcas, devs = tuple(hcas), tuple(devs)
    return LINKS.query(hcas, devs, value=(*hcas, "", *devs))


@dataclass(frozen=True)
class DockerFacts:
    """The docker daemon as its API answers (version None: it does not answer)."""

    version: str | None = None
    error: str = ""
    runtimes: tuple[str, ...] = ()
    hook: str = ""  # path of nvidia-container-runtime-hook on dockerd's PATH


@dataclass
class NetdevFacts:
    """One netdev's link."""

    mtu: int | None = None
    state: str = ""
    ipv4: str = ""  # address/prefix


def parse_docker(lines: list[str]) -> DockerFacts:
    """One `daemon_section`'s lines."""
    values = {key: rest.strip() for key, _, rest in (line.partition(" ") for line in lines)}
    if "version" not in values or not values["version"]:
        return DockerFacts(error=values.get("error", "no answer from docker"),
                           hook=values.get("hook", ""))
    return DockerFacts(values["version"], "", tuple(values.get("runtimes", "").split()),
                       values.get("hook", ""))


def parse_links(lines: list[str]) -> dict[str, NetdevFacts]:
    """One `links_section`'s lines: {netdev: NetdevFacts}."""
    netdevs = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 5 or parts[0] != "netdev":
            continue
        values = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        mtu, state, ipv4 = (values.get(key, "-") for key in ("mtu", "state", "ipv4"))
        netdevs[parts[1]] = NetdevFacts(int(mtu) if mtu.isdigit() else None,
                                        "" if state == "-" else state, "" if ipv4 == "-" else ipv4)
    return netdevs


DOCKER = Fact(daemon_section, parse_docker).query()
LINKS = Fact(links_section, parse_links)
