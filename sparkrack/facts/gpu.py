"""The GPU as the watchdog reads it every poll, in the poll's one round trip: SM clock,
power, temperature, utilization, the thermal margin and why the clock is held down (the
clock event reasons: `nvidia-smi --query-gpu`, SAMPLE: node.py's `sample_section`, with the
node's memory), and once per node the GPU's own slowdown and shutdown temperatures (the
Temperature block of `nvidia-smi -q -d TEMPERATURE`, THERMAL: `thermal_section`).

Drivers before R535 print those thresholds as temperatures (`GPU Slowdown Temp: 89 C`);
newer ones, GB10's 580 among them, print them as offsets from the T.Limit, the
temperature at which the GPU starts slowing itself down (`GPU T.Limit Temp: 57 C` is the
margin left to it, `GPU Slowdown T.Limit Temp: -2 C` that the hardware slowdown comes 2 C
past it). Either way they are turned into temperatures here; a value the GPU gives as
N/A stays unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.facts.node import memory_of, parse_node
from sparkrack.facts.queries import Answers, Fact
from sparkrack.remote.node import sample_section, thermal_section

SAMPLE_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "utilization.gpu")
MARGIN_FIELD = "temperature.gpu.tlimit"  # degrees left before the T.Limit (R535 and later)
REASONS_FIELD = "clocks_event_reasons.active"  # a bitmask, e.g. 0x0000000000000020
OPTIONAL_FIELDS = (MARGIN_FIELD, REASONS_FIELD)  # asked together; an older driver: neither
SAMPLE = Fact(sample_section, parse_node).query(",".join(SAMPLE_FIELDS),
                                               ",".join(OPTIONAL_FIELDS))
# NVML's clock event reasons (nvmlClocksEventReasons): the GPU slowing itself for heat
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40


@dataclass(frozen=True)
class GpuSample:
    """One reading of a node's GPU (None: not reported)."""

    util: int | None
    power_w: float | None
    sm_mhz: int | None = None
    temperature_c: int | None = None
    margin_c: int | None = None  # degrees left before the T.Limit
    event_reasons: int | None = None  # clocks_event_reasons.active (None: not reported)

    @property
    def thermal_slowdown(self) -> str | None:
        """Which thermal slowdown the driver reports active ('HW thermal slowdown', 'SW
        thermal slowdown', both; None: neither, or not reported)."""
        if self.event_reasons is None:
            return None
        active = [name for bit, name in ((HW_THERMAL_SLOWDOWN, "HW thermal slowdown"),
                                         (SW_THERMAL_SLOWDOWN, "SW thermal slowdown"))
                  if self.event_reasons & bit]
        return " and ".join(active) or None


@dataclass(frozen=True)
class Thermal:
    """A GPU's own thresholds, in degrees C (None: nvidia-smi gives N/A)."""

    slowdown_c: float | None = None
    shutdown_c: float | None = None

    @property
    def known(self) -> bool:
        return self.slowdown_c is not None or self.shutdown_c is not None


def _number(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None  # "N/A", "[N/A]", "[Not Supported]"


def parse_sample(answers: Answers) -> GpuSample | None:
    """The GPU reading of a SAMPLE answer (None: nvidia-smi failed or said nothing)."""
    rc, _, line = answers.get(SAMPLE).get("gpu", "1 ").partition(" ")
    values = [v.strip() for v in line.split(",")]
    if rc != "0" or len(values) not in (len(SAMPLE_FIELDS), len(SAMPLE_FIELDS) + 1,
                                        len(SAMPLE_FIELDS) + len(OPTIONAL_FIELDS)):
        return None
    sm, power, temperature, util, margin = ([_number(v) for v in values] + [None])[:5]
    reasons = _bitmask(values[5]) if len(values) > 5 else None
    return GpuSample(_whole(util), power, _whole(sm), _whole(temperature), _whole(margin),
                     reasons)


def _bitmask(text: str) -> int | None:
    """A bitmask nvidia-smi prints in hex (0x0000000000000020); None for N/A."""
    try:
        return int(text, 16)
    except ValueError:
        return None


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def sample_memory(answers: Answers) -> tuple[int, int] | None:
    """(MemTotal kB, MemAvailable kB) of a SAMPLE answer."""
    return memory_of(answers, SAMPLE)


def parse_thermal(lines: list[str]) -> Thermal:
    """The slowdown and shutdown temperatures of a THERMAL answer's lines."""
    values = {}
    for line in lines:
        label, _, value = line.partition(":")
        label = label.strip().replace(" Specification", "").replace(
            "GPU Current T.Limit Temp", "GPU T.Limit Temp")
        values[label] = _number(value)
    current, margin = values.get("GPU Current Temp"), values.get("GPU T.Limit Temp")

    def absolute(name: str) -> float | None:
        if values.get(f"GPU {name} Temp") is not None:
            return values[f"GPU {name} Temp"]
        offset = values.get(f"GPU {name} T.Limit Temp")
        if offset is None or current is None or margin is None:
            return None
        return current + margin - offset

    return Thermal(absolute("Slowdown"), absolute("Shutdown"))


THERMAL = Fact(thermal_section, parse_thermal).query()
