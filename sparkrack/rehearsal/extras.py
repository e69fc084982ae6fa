"""Extra rehearsal nodes: bare Sparks outside the inventory, for onboarding and replacement
(an OS, sshd, docker, the simulated GPU and HCAs, nothing of sparkrack), kept in
EXTRA_NODES_FILE (docs/formats.md#extra-rehearsal-nodes).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from ipaddress import ip_address, ip_network

from sparkrack.core.errors import UsageError
from sparkrack.rehearsal.layout import (
    BRIDGE_ADDR,
    EXTRA_NODES_FILE,
    HCAS,
    PDU_ADDR,
    NodeLayout,
)
from sparkrack.rehearsal.nodefs import write_if_changed

NODE_SUBNET = ip_network(BRIDGE_ADDR, strict=False)  # 10.77.1.0/24: the nodes' bridge
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
_DRIVER = re.compile(r"\d{2,4}(\.\d{1,4}){1,2}")
_KERNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")


@dataclass(frozen=True)
class ExtraNode:
    """One extra node's identity and simulated hardware."""

    name: str
    address: str
    driver_version: str | None = None
    missing_hcas: tuple[str, ...] = field(default=())
    kernel: str | None = None

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout(self.name, self.address)

    @property
    def gpu(self) -> dict:
        """Extra keys for the node's /etc/gpu-sim/node.json."""
        return {"driver_version": self.driver_version} if self.driver_version else {}

    def as_json(self) -> dict:
        data = asdict(self)
        data.pop("name")
        data["missing_hcas"] = list(self.missing_hcas)
        return data

    def describe(self) -> str:
        """Its address and what it has of its own, e.g. "10.77.1.20, driver 575.51.03"."""
        return ", ".join([self.address] + [part for value, part in (
            (self.driver_version, f"driver {self.driver_version}"),
            (self.missing_hcas, f"missing {','.join(self.missing_hcas)}"),
            (self.kernel, f"kernel {self.kernel}")) if value])


def check_extra(extra: ExtraNode, taken_names: set[str], taken_addresses: set[str]) -> None:
    """UsageError unless extra is a valid, new node for the rack."""
    if not _NAME.fullmatch(extra.name):
        raise UsageError(f"invalid node name {extra.name!r}",
                         fix="lower-case letters, digits and '-', e.g. spark-09")
    if extra.name in taken_names:
        raise UsageError(f"{extra.name} is already a rehearsal node",
                         fix="choose another name, or `invoke rehearsal.remove-node` it first")
    try:
        address = ip_address(extra.address)
    except ValueError:
        raise UsageError(f"--address {extra.address!r} is not an IP address",
                         fix="give one in 10.77.1.0/24, e.g. 10.77.1.19") from None
    bridge = ip_address(BRIDGE_ADDR.split("/")[0])
    if (address not in NODE_SUBNET or address in (bridge, ip_address(PDU_ADDR),
                                                  NODE_SUBNET.network_address,
                                                  NODE_SUBNET.broadcast_address)):
        raise UsageError(f"--address {extra.address} is not a node address of the rehearsal "
                         f"bridge {NODE_SUBNET}", fix="use 10.77.1.3..10.77.1.253 (.2 is the PDU), e.g. 10.77.1.19")
    if extra.address in taken_addresses:
        raise UsageError(f"address {extra.address} is taken by another rehearsal node",
                         fix="choose a free one, e.g. 10.77.1.19 or 10.77.1.20")
    if extra.driver_version is not None and not _DRIVER.fullmatch(extra.driver_version):
        raise UsageError(f"--driver-version {extra.driver_version!r} is not a driver version",
                         fix="e.g. 575.51.03")
    unknown = sorted(set(extra.missing_hcas) - set(HCAS))
    if unknown:
        raise UsageError(f"--missing-hca {', '.join(unknown)}: no such HCA on a Spark",
                         fix=f"one of {', '.join(HCAS)}")
    if extra.kernel is not None and not _KERNEL.fullmatch(extra.kernel):
        raise UsageError(f"--kernel {extra.kernel!r} is not a kernel release",
                         fix="e.g. 7.0.0-1019-nvidia")


def read_extras() -> dict[str, ExtraNode]:
    """The extra nodes on record (an unreadable file counts as none)."""
    try:
        data = json.loads(EXTRA_NODES_FILE.read_text())
    except (OSError, ValueError):
        return {}
    extras = {}
    for name, body in (data.items() if isinstance(data, dict) else ()):
        try:
            extras[name] = ExtraNode(name, body["address"], body.get("driver_version"),
                                     tuple(body.get("missing_hcas") or ()), body.get("kernel"))
        except (KeyError, TypeError, AttributeError):
            continue
    return extras


def write_extras(extras: dict[str, ExtraNode]) -> None:
    """Record the extra nodes (the file goes when none is left)."""
    if not extras:
        EXTRA_NODES_FILE.unlink(missing_ok=True)
        return
    data = {name: extras[name].as_json() for name in sorted(extras)}
    write_if_changed(EXTRA_NODES_FILE, (json.dumps(data, indent=1) + "\n").encode())
