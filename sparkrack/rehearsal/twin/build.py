"""`invoke rehearsal.up --twin FILE`: a rehearsal rack with a capture's shape (its nodes'
names, kernels, GPUs, GID layouts, cables and MTUs) and its inventory; what a twin cannot
be is refused naming the node (docs/rehearsal.md#rehearse-on-your-twin).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sparkrack.core.atomic import fsync_dir, write_atomically
from sparkrack.core.errors import UsageError
from sparkrack.facts.capture import RACK_VARS
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal import nodefs, nodeproc
from sparkrack.rehearsal.cabling import Cabling, write_cabling
from sparkrack.rehearsal.layout import FUNCTIONS, NodeLayout
from sparkrack.rehearsal.twin.trust import (
    MARK,
    check_folder,
    comment,
    node_names,
    node_vars,
)
from sparkrack.rehearsal.twinfile import read_twin, write_twin

DEFAULT_MTU = 1500  # a fabric netdev's before anything set another
MAX_NODES = 12  # what this machine (2 cores, 24 GiB) boots as rehearsal nodes
KEEP = ("images", "model_path", "fabric_prefix")  # the rehearsal's: its stub engines, its nets
FIX = "capture again once every node answers, or edit the capture file"


def node_shapes(capture: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{node: shape} for the twin: gpu keys, kernel, gid_index, cabling (a function down
    while its port is cabled is a path that did not come up), missing, the netdevs' MTUs
    that are not the default (pure); UsageError naming a node the simulator cannot be."""
    nodes = capture["nodes"]
    node_names(capture)
    if not 2 <= len(nodes) <= MAX_NODES:
        raise UsageError(f"the capture has {len(nodes)} node(s); a twin on this machine has "
                         f"2 to {MAX_NODES}", fix="capture a rack of that size")
    return {node["name"]: _shape(node) for node in sorted(nodes, key=lambda n: n["rank"])}


def _shape(node: dict[str, Any]) -> dict[str, Any]:
    name = node["name"]
    if not node.get("reachable"):
        raise UsageError(f"{name} did not answer the capture ({node.get('error', '')})", fix=FIX)
    functions = node.get("functions") or {}
    gpu = {key: value for key, value in (
        ("name", node.get("gpu")), ("driver_version", node.get("driver")),
        ("cuda_version", node.get("cuda")), ("mem_total_kb", node.get("memory_kib")))
        if value}
    return {"gpu": gpu, "kernel": node.get("kernel") or None,
            "gid_index": _gid_index(name, functions), "cabling": _cabling(name, functions),
            "missing": sorted(hca for hca, _ in FUNCTIONS.values() if hca not in functions),
            "mtu": {dev: info["mtu"] for f in functions.values()
                    for dev, info in (f.get("netdevs") or {}).items()
                    if info.get("mtu") not in (None, DEFAULT_MTU)}}


def _gid_index(name: str, functions: dict[str, Any]) -> int:
    """Where the node's RoCE v2 IPv4 GID sits (3 when none is addressed)."""
    for hca, _ in FUNCTIONS.values():
        for row in (functions.get(hca) or {}).get("gids", []):
            index, version, family = (row.split() + ["", "", ""])[:3]
            if version == "v2" and family == "ipv4" and index.isdigit():
                found = int(index)
                if found < 3:
                    raise UsageError(f"{name}: its RoCE v2 IPv4 GID sits at index {found}, "
                                     "which the simulated GID table has no place for (3 or "
                                     "above)", fix=FIX)
                return found
    return 3


def _cabling(name: str, functions: dict[str, Any]) -> dict[str, Any]:
    """The node's cable as Cabling's fields, from which functions are up."""
    up = {key for key, (hca, _) in FUNCTIONS.items()
          if (functions.get(hca) or {}).get("state") == "4: ACTIVE"}
    ports = {port for port, _ in up}
    if not up:
        return {"port": 0, "paths": "none"}
    if len(ports) > 1:
        raise UsageError(f"{name}: both QSFP ports are up, and a twin node has one cable",
                         fix=FIX)
    port = ports.pop()
    if (port, "a") not in up:
        raise UsageError(f"{name}: port {port} is up on its second path only, which the "
                         "rehearsal's cables cannot be", fix=FIX)
    return {"port": port, "paths": "both" if (port, "b") in up else "one"}


def write_inventory(capture: dict[str, Any], base: Path, out: Path) -> Path:
    """The twin's inventory in out: hosts.yml (the capture's names and ranks, rehearsal
    addresses), group_vars/all.yml (the rehearsal's, with the capture's rack vars but
    KEEP), host_vars for each node's own vars (trust.py: checked before anything is
    written). It is built whole in a private folder beside out and renamed into place,
    so nothing is written through a link planted in out after the check, and a failure
    leaves out as it was."""
    own = node_vars(capture, node_names(capture))
    check_folder(out, list(own))
    nodes = sorted(capture["nodes"], key=lambda n: n["rank"])
    hosts = {name: {"ansible_host": f"10.77.1.{11 + i}", "roce_addr": f"10.77.3.{11 + i}",
                    "roce_twin_addr": f"10.77.4.{11 + i}", "rank": node["rank"]}
             for i, node in enumerate(nodes) for name in [node["name"]]}
    base_hosts = yaml.safe_load((base / "hosts.yml").read_text())
    group_vars = base_hosts["all"]["children"]["sparks"].get("vars", {})
    rack_vars = yaml.safe_load((base / "group_vars" / "all.yml").read_text())
    rack = capture["rack"]
    rack_vars.update({key: rack[key] for key in RACK_VARS if key in rack and key not in KEEP})
    rack_vars["tp_size"] = len(nodes)
    if isinstance(rack_vars.get("pdu"), dict):
        rack_vars["pdu"]["outlets"] = _outlets(rack_vars["pdu"].get("outlets") or {},
                                               base_hosts, nodes)
    header = (f"{MARK}{comment(rack.get('rack_name', '?'))} (captured "
              f"{comment(capture.get('captured', '?'))}), written by `invoke rehearsal.up "
              "--twin`.\n")
    files = {"hosts.yml": header + yaml.safe_dump(
                 {"all": {"children": {"sparks": {"hosts": hosts, "vars": group_vars}}}},
                 sort_keys=False),
             "group_vars/all.yml": header + yaml.safe_dump(rack_vars, sort_keys=False),
             **{f"host_vars/{name}.yml": yaml.safe_dump(values)
                for name, values in own.items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # 0700, ours
    try:
        for folder in ("group_vars", "host_vars"):
            (built / folder).mkdir()
        for path, text in files.items():
            write_atomically(built / path, text, mode=0o644)
        built.chmod(0o755)
        _put_in_place(built, out)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    return out


def _put_in_place(built: Path, out: Path) -> None:
    """Rename the folder built over out: an earlier twin (or whatever stands there now,
    a link included) is moved whole into a private folder first and removed there
    (rmtree follows no link)."""
    if not out.exists() and not out.is_symlink():
        os.rename(built, out)
    else:
        earlier = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.rename(out, earlier / out.name)
        os.rename(built, out)
        shutil.rmtree(earlier)
    fsync_dir(out.parent)


def _outlets(outlets: dict[str, int], base_hosts: dict[str, Any],
             nodes: list[dict[str, Any]]) -> dict[str, int]:
    """The rehearsal PDU's outlets for the twin's nodes: each on the outlet of the
    rehearsal node whose place (address, rank order) it takes, past them outlet rank + 1."""
    places = sorted(base_hosts["all"]["children"]["sparks"]["hosts"].items(),
                    key=lambda item: item[1].get("rank", 0))
    return {node["name"]: outlets.get(places[i][0], i + 1) if i < len(places) else i + 1
            for i, node in enumerate(nodes)}


def prepare_disks(inventory, shapes: dict[str, dict[str, Any]]) -> None:
    """Each twin node's disk made anew with its shape: kernel, cabling, HCAs and GID table
    (the simulated GPU's keys are written at boot, from the twin record)."""
    for node in inventory.nodes:
        layout = NodeLayout(node.name, node.address, node.roce_addr)
        if nodeproc.init_pid(layout) is not None:
            raise UsageError(f"{node.name} is running", fix="run `invoke rehearsal.down` first")
        shape = shapes[node.name]
        nodefs.wipe(layout)
        nodefs.write_kernel(layout, shape["kernel"])
        nodefs.write_hardware(layout, shape["missing"], shape["gid_index"])
        write_cabling(layout, Cabling(**shape["cabling"]).check())


def build_twin(capture: dict[str, Any], base: Path, out: Path, say=print):
    """Write the twin's inventory, record the twin, lay its disks down and boot it; the
    rack (RehearsalRack of the twin's inventory)."""
    from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
    from sparkrack.rehearsal.rack import RehearsalRack

    if REHEARSAL_STATE_FILE.exists():
        raise UsageError("the rehearsal rack is up", fix="run `invoke rehearsal.down` first: "
                         "the twin takes its place")
    shapes = node_shapes(capture)
    inventory = load_inventory(write_inventory(capture, base, out))
    earlier = read_twin()  # a twin built before, of other nodes: their disks go too
    for name in (earlier or {}).get("nodes", {}):
        if name not in shapes:
            nodefs.wipe(NodeLayout(name, "10.77.1.250"))
    write_twin(out, {name: {"gpu": shape["gpu"]} for name, shape in shapes.items()})
    prepare_disks(inventory, shapes)
    rack = RehearsalRack(inventory, say=say)
    rack.up()
    for name, shape in shapes.items():  # what someone set by hand stays set, as on the rack
        for netdev, mtu in shape["mtu"].items():
            rack.netdev_mtu(name, netdev, mtu)
    return rack
