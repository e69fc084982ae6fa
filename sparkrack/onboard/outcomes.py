"""What the onboarding steps find and plan, as the report (context.py) carries them: a
node's facts and its differences from the rack (step 2, baseline.py), each image's outcome
(step 4, stage.py), the reach and burn (step 5, verify.py), the hosts.yml edit (step 6,
join.py). The steps build them; the report and its JSON read them (docs/onboarding.md).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from sparkrack.facts.onboard import NetdevFacts
from sparkrack.safety.burn import BurnResult
from sparkrack.transfer.images import TransferReport, short_id
from sparkrack.transfer.manifest import size_text

# --- Step 2, baseline ------------------------------------------------------------------


@dataclass
class Facts:
    """One node's onboarding facts."""

    node: str
    error: str | None = None  # unreachable or the facts could not be read
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    kernel_problem: str | None = None  # why the kernel breaks RDMA (facts.kernel), or None
    gpu_name: str | None = None
    gpu_error: str | None = None
    driver: str | None = None
    mem_total_kb: int | None = None
    sm_mhz: int | None = None
    clock_cap: str = ""  # active/result of the clock cap unit, e.g. "active/success"
    docker: str | None = None  # server version; None: does not answer
    docker_error: str = ""
    runtimes: tuple[str, ...] = ()
    hook: str = ""  # path of nvidia-container-runtime-hook on dockerd's PATH
    hcas: dict = field(default_factory=dict)  # name -> {present, state, netdevs, gid_index}
    gid_index: int | None = None
    gid_conflict: bool = False
    netdevs: dict[str, NetdevFacts] = field(default_factory=dict)
    images: dict[str, str] | None = None  # ref -> image ID
    skew_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def nvidia_runtime(self) -> bool:
        return bool(self.hook) or "nvidia" in self.runtimes

    def row(self) -> dict:
        """The facts as one table row (for reports)."""
        return {
            "os": self.os, "kernel": self.kernel, "driver": self.driver or "-",
            "gpu": self.gpu_name or f"none ({self.gpu_error})",
            "memory": f"{self.mem_total_kb / 2**20:.1f} GiB" if self.mem_total_kb else "-",
            "docker": self.docker or "none",
            "nvidia runtime": "yes" if self.nvidia_runtime else "no",
            "hcas": ", ".join(f"{n}:{'ok' if h['present'] else 'MISSING'}"
                              f"{'' if not h['present'] else '/' + (h['state'] or '?')}"
                              for n, h in self.hcas.items()),
            "mtu": ", ".join(f"{n}={d.mtu}" for n, d in self.netdevs.items()),
            "gid index": "-" if self.gid_index is None else str(self.gid_index),
            "clock cap": self.clock_cap, "sm MHz": str(self.sm_mhz or "-"),
        }


@dataclass(frozen=True)
class Difference:
    """One way the new node differs from the rack."""

    kind: str
    what: str  # the fact, e.g. "driver", "HCA roceP2p1s0f0", "MTU enp1s0f0np0"
    node_value: str
    rack_value: str
    blocking: bool
    waived: str | None = None  # the operator's reason, if waived

    @property
    def refuses(self) -> bool:
        return self.blocking and self.waived is None

    def line(self) -> str:
        verdict = ("REFUSED" if self.refuses else f"WAIVED ({self.waived})" if self.waived
                   else "note")
        return (f"{self.kind}: {self.what} is {self.node_value}, the rack has "
                f"{self.rack_value} [{verdict}]")


# --- Step 4, stage ---------------------------------------------------------------------


@dataclass
class ImageOutcome:
    ref: str
    image_id: str | None
    source: str
    present: bool = False
    transfer: TransferReport | None = None
    error: str | None = None

    def line(self) -> str:
        if self.error:
            return f"{self.ref}: {self.error}"
        shown = short_id(self.image_id or "")
        if self.present:
            return f"{self.ref} {shown}: present"
        if self.transfer is None:
            return f"{self.ref} {shown}: would be sent from {self.source}"
        t = self.transfer
        return (f"{self.ref} {shown}: sent from {self.source} "
                f"({size_text(t.bytes_moved)}, {t.seconds:.1f} s)")


# --- Step 5, verify --------------------------------------------------------------------


@dataclass
class Reach:
    """One probe: source -> target:port and how it went."""

    source: str
    target: str
    port: int
    state: str  # ok | service (port in use, reached) | failed
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state in ("ok", "service")


@dataclass
class VerifyReport:
    reach: list[Reach] = field(default_factory=list)
    burn: BurnResult | None = None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Reach]:
        return [r for r in self.reach if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.errors and not self.failed and self.burn is not None and self.burn.ok


# --- Step 6, join ----------------------------------------------------------------------


@dataclass
class JoinPlan:
    """What step 6 writes."""

    hosts_before: str
    hosts_after: str
    moved_host_vars: dict[str, str] = field(default_factory=dict)  # from -> to (relative)
    rank: int | None = None  # None: a spare
    edited_vars: dict[str, tuple[str, str]] = field(default_factory=dict)  # file: before, after

    @property
    def unchanged(self) -> bool:
        return (self.hosts_after == self.hosts_before and not self.moved_host_vars
                and not self.edited_vars)

    def diff(self) -> str:
        files = [("hosts.yml", self.hosts_before, self.hosts_after),
                 *((name, *texts) for name, texts in self.edited_vars.items())]
        return "".join("".join(difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            name, f"{name} (after onboarding)")) for name, before, after in files)
