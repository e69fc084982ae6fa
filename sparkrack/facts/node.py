"""Node facts for `status`, `up`/`roll`'s gates, restarts and the watchdog: hostname,
kernel (release, command line, CMA counters), OS, boot id, GPU, memory, the clock cap unit
and the last burn record.

`queries()` are what a round trip asks for them (NODE: node.py's `node_section` on the node,
`parse_node` here; the cap unit; the burn record); `facts_of(answers)` parses them into
`NodeFacts`. Whether the GPU's cap
was verified is decided here once: `burn_this_boot` (a burn counts only with this boot's id).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from sparkrack.facts.files import FileFacts, file_query
from sparkrack.facts.kernel import KernelFacts
from sparkrack.facts.queries import Answers, Fact, Query, answer, argv
from sparkrack.facts.systemd import UnitFacts, unit_query
from sparkrack.remote.node import memory_section, node_section

CLOCK_CAP_UNIT = "sparkrack-clock-cap.service"
BURN_RECORD = "/var/lib/sparkrack/burn.json"
GPU_FIELDS = ("name", "clocks.sm", "clocks.max.sm", "power.draw", "temperature.gpu",
              "utilization.gpu", "pstate", "persistence_mode", "driver_version", "compute_cap")
CAP_UNIT = unit_query(CLOCK_CAP_UNIT)
BURN = file_query(BURN_RECORD)


def queries() -> list[Query]:
    """What a round trip asks for the node facts."""
    return [NODE, CAP_UNIT, BURN]


def facts_argv() -> list[str]:
    """The argv that gathers the node facts alone."""
    return argv(queries())


@dataclass
class GpuFacts:
    """What nvidia-smi says about the node's GPU (None when it could not say)."""

    name: str | None = None
    sm_mhz: int | None = None
    max_sm_mhz: int | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    utilization_pct: int | None = None
    pstate: str | None = None
    persistence: str | None = None
    driver: str | None = None
    compute_cap: str | None = None  # "12.1" on a GB10: the compile caches' arch
    error: str | None = None


@dataclass
class NodeFacts:
    """Everything one round trip learns about a node."""

    hostname: str = ""
    kernel: str = ""
    os: str = ""
    boot_id: str = ""
    gpu: GpuFacts = field(default_factory=GpuFacts)
    mem_total_kb: int | None = None
    mem_available_kb: int | None = None
    clock_cap: UnitFacts = field(default_factory=UnitFacts)
    burn: dict | None = None
    cmdline: str | None = None
    cma_total_kb: int | None = None
    cma_free_kb: int | None = None

    def as_dict(self) -> dict:
        """Plain data for --json."""
        return asdict(self)

    def kernel_facts(self) -> KernelFacts:
        """The host kernel as the rules judge it."""
        return KernelFacts(self.kernel, self.cmdline, self.cma_total_kb, self.cma_free_kb)


def burn_this_boot(facts: NodeFacts | None) -> dict | None:
    """The node's burn record if it was made this boot, else None: a burn before a reboot
    proves nothing (the lock does not survive one)."""
    burn = facts.burn if facts is not None else None
    if not burn or not facts.boot_id or burn.get("boot_id") != facts.boot_id:
        return None
    return burn


def _number(text: str, kind=int):
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpu(rc: int, line: str) -> GpuFacts:
    """Parse a line of `nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits`."""
    if rc != 0 or not line:
        return GpuFacts(error=line or f"nvidia-smi exit {rc}")
    values = [v.strip() for v in line.split(",")]
    if len(values) != len(GPU_FIELDS):
        return GpuFacts(error=f"unexpected nvidia-smi output: {line}")
    name, sm, max_sm, power, temp, util, pstate, persistence, driver, cap = values
    return GpuFacts(name=name, sm_mhz=_number(sm), max_sm_mhz=_number(max_sm),
                    power_w=_number(power, float), temperature_c=_number(temp),
                    utilization_pct=_number(util), pstate=pstate, persistence=persistence,
                    driver=driver, compute_cap=None if cap.startswith("[") else cap)


def parse_burn(record: FileFacts) -> dict | None:
    """The node's last burn-check record (JSON written by `invoke burn`), if any."""
    if record.content is None:
        return None
    try:
        found = json.loads(record.content)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def parse_node(lines: list[str]) -> dict[str, str]:
    """One `node_section`'s lines: {hostname, kernel, os, gpu, MemTotal, MemAvailable,
    CmaTotal, CmaFree, cmdline: the rest of the line} (`memory_section`'s and
    `sample_section`'s, the keys they print)."""
    return {key: rest for key, _, rest in (line.partition(" ") for line in lines)}


NODE = Fact(node_section, parse_node).query(",".join(GPU_FIELDS))
MEMORY = Fact(memory_section, parse_node).query()  # MemTotal and MemAvailable alone (watch's)


def gpu_of(answers: Answers) -> GpuFacts:
    """The GPU of a round trip's NODE answer."""
    rc, _, line = answers.get(NODE).get("gpu", "1 ").partition(" ")
    return parse_gpu(int(rc) if rc.lstrip("-").isdigit() else 1, line.strip())


def facts_of(answers: Answers) -> NodeFacts:
    """The node facts of a round trip's answers."""
    node = answers.get(NODE)
    return NodeFacts(
        hostname=node.get("hostname", ""), kernel=node.get("kernel", ""),
        os=node.get("os", ""), boot_id=answers.boot_id, gpu=gpu_of(answers),
        mem_total_kb=_number(node.get("MemTotal", "")),
        mem_available_kb=_number(node.get("MemAvailable", "")),
        clock_cap=answers.get(CAP_UNIT), burn=parse_burn(answers.get(BURN)),
        cmdline=node.get("cmdline"),
        cma_total_kb=_number(node.get("CmaTotal", "")),
        cma_free_kb=_number(node.get("CmaFree", "")))


def memory_of(answers: Answers, query: Query = MEMORY) -> tuple[int, int] | None:
    """(MemTotal kB, MemAvailable kB) of a MEMORY (or NODE) answer, or None if the node did
    not say."""
    node = answers.get(query)
    total, available = _number(node.get("MemTotal", "")), _number(node.get("MemAvailable", ""))
    return None if total is None or available is None else (total, available)


def parse_facts(text: str) -> NodeFacts:
    """The output of facts_argv() -> NodeFacts."""
    return facts_of(answer(text, queries()))
