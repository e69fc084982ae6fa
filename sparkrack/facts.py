"""Node facts: one shell script per node per round trip, parsed by pure functions.

The script prints sections (`@@ name rc`) that the parsers turn into `NodeFacts`. It is a
constant: the only values it gets are positional arguments, never formatted into it.
"""

import json
from dataclasses import asdict, dataclass, field

CLOCK_CAP_UNIT = "sparkrack-clock-cap.service"
BURN_RECORD = "/var/lib/sparkrack/burn.json"
GPU_FIELDS = ("name", "clocks.sm", "clocks.max.sm", "power.draw", "temperature.gpu",
              "utilization.gpu", "pstate", "persistence_mode", "driver_version")

FACTS_SCRIPT = r"""
section() { printf '\n@@ %s %s\n' "$1" "$2"; }
out=$(hostname); section hostname $?; printf '%s\n' "$out"
out=$(uname -r); section kernel $?; printf '%s\n' "$out"
out=$(. /etc/os-release 2>/dev/null; printf '%s' "$PRETTY_NAME"); section os $?; printf '%s\n' "$out"
out=$(cat /proc/sys/kernel/random/boot_id); section boot_id $?; printf '%s\n' "$out"
out=$(nvidia-smi --query-gpu="$1" --format=csv,noheader,nounits 2>&1); section gpu $?; printf '%s\n' "$out"
out=$(grep -E '^(MemTotal|MemAvailable):' /proc/meminfo); section meminfo $?; printf '%s\n' "$out"
out=$(systemctl show "$2" -p LoadState,ActiveState,SubState,Result,ExecMainStatus,UnitFileState,ActiveEnterTimestampMonotonic 2>&1); section clock_cap $?; printf '%s\n' "$out"
out=$(cat "$3" 2>/dev/null); section burn $?; printf '%s\n' "$out"
"""


def facts_argv() -> list[str]:
    """The argv that runs the facts script on a node."""
    return ["sh", "-c", FACTS_SCRIPT, "sparkrack-facts", ",".join(GPU_FIELDS),
            CLOCK_CAP_UNIT, BURN_RECORD]


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
    error: str | None = None


@dataclass
class UnitFacts:
    """A systemd unit's state as `systemctl show` reports it."""

    load: str = "not-found"
    active: str = "inactive"
    sub: str = "dead"
    result: str = ""
    exit_status: int | None = None
    enabled: str = ""
    active_since_monotonic_us: int = 0


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

    def as_dict(self) -> dict:
        """Plain data for --json."""
        return asdict(self)


def split_sections(text: str) -> dict[str, tuple[int, str]]:
    """`@@ name rc` sections of the script output -> {name: (rc, body)}."""
    sections: dict[str, tuple[int, str]] = {}
    name, rc, body = None, 0, []
    for line in text.splitlines():
        if line.startswith("@@ "):
            if name:
                sections[name] = (rc, "\n".join(body).strip())
            parts = line.split()
            name, rc, body = parts[1], int(parts[2]) if len(parts) > 2 else 0, []
        elif name:
            body.append(line)
    if name:
        sections[name] = (rc, "\n".join(body).strip())
    return sections


def _number(text: str, kind=int):
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpu(rc: int, body: str) -> GpuFacts:
    """Parse `nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits`."""
    if rc != 0 or not body:
        return GpuFacts(error=body.splitlines()[0] if body else f"nvidia-smi exit {rc}")
    values = [v.strip() for v in body.splitlines()[0].split(",")]
    if len(values) != len(GPU_FIELDS):
        return GpuFacts(error=f"unexpected nvidia-smi output: {body.splitlines()[0]}")
    name, sm, max_sm, power, temp, util, pstate, persistence, driver = values
    return GpuFacts(name=name, sm_mhz=_number(sm), max_sm_mhz=_number(max_sm),
                    power_w=_number(power, float), temperature_c=_number(temp),
                    utilization_pct=_number(util), pstate=pstate, persistence=persistence,
                    driver=driver)


def parse_meminfo(body: str) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in kB from /proc/meminfo lines."""
    values = {}
    for line in body.splitlines():
        key, _, rest = line.partition(":")
        values[key.strip()] = _number(rest.split()[0]) if rest.split() else None
    return values.get("MemTotal"), values.get("MemAvailable")


def parse_unit(body: str) -> UnitFacts:
    """Parse `systemctl show UNIT -p ...` key=value lines."""
    kv = dict(line.split("=", 1) for line in body.splitlines() if "=" in line)
    return UnitFacts(
        load=kv.get("LoadState", "not-found"), active=kv.get("ActiveState", "inactive"),
        sub=kv.get("SubState", "dead"), result=kv.get("Result", ""),
        exit_status=_number(kv["ExecMainStatus"]) if kv.get("ExecMainStatus") else None,
        enabled=kv.get("UnitFileState", ""),
        active_since_monotonic_us=_number(kv.get("ActiveEnterTimestampMonotonic", "0")) or 0)


def parse_burn(rc: int, body: str) -> dict | None:
    """The node's last burn-check record (JSON written by `invoke burn`), if any."""
    if rc != 0 or not body:
        return None
    try:
        record = json.loads(body)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def parse_facts(text: str) -> NodeFacts:
    """The whole facts script output -> NodeFacts."""
    s = split_sections(text)
    get = lambda name: s.get(name, (1, ""))  # noqa: E731
    total, available = parse_meminfo(get("meminfo")[1])
    return NodeFacts(
        hostname=get("hostname")[1], kernel=get("kernel")[1], os=get("os")[1],
        boot_id=get("boot_id")[1], gpu=parse_gpu(*get("gpu")), mem_total_kb=total,
        mem_available_kb=available, clock_cap=parse_unit(get("clock_cap")[1]),
        burn=parse_burn(*get("burn")))
