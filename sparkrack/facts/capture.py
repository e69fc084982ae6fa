"""A rack's shape as one file: what `invoke facts.capture` records of each node in one
read-only round trip, and what a rehearsal twin is built from.

Per node: its name and rank, kernel, OS, GPU name, driver and CUDA versions, memory,
docker's version, the clock-cap unit's state, and each of a Spark's four RDMA functions
(SPARK_HCAS) it has: port state, link rate, netdevs with their MTU and state, and the GID
table as its layout (each filled index's RoCE version and address family: `3 v2 ipv4`),
never the addresses in it. Rack
wide: the inventory vars that shape the rack. No address, port, host key, user, key path or
token is in it, so that a capture can go with a bug report. Nothing about the rack's
health is refused: a node that does not answer is recorded as such, with the kind of
failure alone (unreachable, authentication refused, host key unknown or changed, query
failed).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sparkrack.facts.node import CAP_UNIT, NODE, gpu_of
from sparkrack.facts.onboard import DOCKER, links_query
from sparkrack.facts.queries import Answers, Fact, Query
from sparkrack.facts.roce import SPARK_HCAS, HcaFacts, roce_query
from sparkrack.inventory.schema import plain
from sparkrack.remote.node import cuda_section


def parse_cuda(lines: list[str]) -> str:
    """One `cuda_section`'s lines: the CUDA version ('' when nvidia-smi did not say)."""
    return dict(line.split(" ", 1) for line in lines if " " in line).get("cuda", "")


VERSION = 1
CUDA = Fact(cuda_section, parse_cuda).query()
RACK_VARS = ("rack_name", "tp_size", "clock_cap_mhz", "nccl_ib_hca", "nccl_socket_ifname",
             "nccl_ib_gid_index", "fabric_prefix", "fabric_mtu", "images", "model_name",
             "indexer_mem_fraction", "api_port")
NODE_VARS = ("nccl_ib_hca", "nccl_socket_ifname", "nccl_ib_gid_index")  # a node may differ


def queries() -> list[Query]:
    """Everything one capture asks a node, in one round trip."""
    return [NODE, CUDA, DOCKER, CAP_UNIT, *(roce_query(h) for h in SPARK_HCAS),
            links_query(SPARK_HCAS, ())]


def gid_layout(hca: HcaFacts) -> list[str]:
    """Each filled GID index as `INDEX VERSION FAMILY` (`3 v2 ipv4`), the address left out."""
    rows = []
    for index in sorted(hca.gids):
        version = "v2" if hca.types.get(index, "").endswith("v2") else "v1"
        rows.append(f"{index} {version} {gid_family(hca.gids[index])}")
    return rows


def gid_family(gid: str) -> str:
    """ipv4 (IPv4-mapped), link-local (fe80::/10) or ipv6, of a GID as sysfs prints it."""
    try:
        address = ipaddress.IPv6Address(gid.strip())
    except ValueError:
        return "unknown"
    if address.ipv4_mapped is not None:
        return "ipv4"
    return "link-local" if address.is_link_local else "ipv6"


def node_capture(name: str, rank: int, answers: Answers) -> dict[str, Any]:
    """One node's record from its answers to queries()."""
    node = answers.get(NODE)
    gpu = gpu_of(answers)
    docker = answers.get(DOCKER)
    unit = answers.get(CAP_UNIT)
    links = answers.get(links_query(SPARK_HCAS, ()))
    functions = {}
    for hca_name in sorted(SPARK_HCAS):
        hca = answers.get(roce_query(hca_name))
        if not hca.present:
            continue
        netdevs = {dev: {"mtu": links[dev].mtu if dev in links else None,
                         "state": links[dev].state if dev in links else ""}
                   for dev in hca.netdevs}
        functions[hca_name] = {"state": hca.state, "rate": hca.rate, "netdevs": netdevs,
                               "gids": gid_layout(hca)}
    memory = node.get("MemTotal", "")
    return {
        "name": name, "rank": rank, "reachable": True,
        "kernel": node.get("kernel", ""), "os": node.get("os", ""),
        "gpu": gpu.name or "", "driver": gpu.driver or "", "cuda": answers.get(CUDA),
        "memory_kib": int(memory) if memory.isdigit() else None,
        "docker": docker.version or "",
        "clock_cap_unit": {"load": unit.load, "active": unit.active, "result": unit.result,
                           "enabled": unit.enabled},
        "functions": functions,
        "cabled": sorted(n for n, f in functions.items() if f["state"] == "4: ACTIVE"),
    }


def unreachable(name: str, rank: int, error: str) -> dict[str, Any]:
    """The record of a node that did not answer; error is a category (rehearsal/twin/capture.py
    failure), never the fleet's message, which names the address, user and key."""
    return {"name": name, "rank": rank, "reachable": False, "error": error}


def rack_record(inventory) -> dict[str, Any]:
    """The inventory vars that shape the rack, and each node's own where it differs."""
    rack = {key: plain(getattr(inventory.vars, key)) for key in RACK_VARS}
    own = {}
    for node in inventory.nodes:
        differs = {key: plain(getattr(node.vars, key)) for key in NODE_VARS
                   if getattr(node.vars, key) != getattr(inventory.vars, key)}
        if differs:
            own[node.name] = differs
    return {**rack, "node_vars": own}
