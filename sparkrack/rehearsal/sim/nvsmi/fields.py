"""--query-gpu fields of nvidia-smi on a GB10: canonical names, aliases, units, values.

Headers use the canonical name plus ' [unit]' (clocks.sm -> 'clocks.current.sm [MHz]');
values carry ' unit' unless nounits; unsupported values print '[N/A]' either way.
No field reports the locked clock range, as on real hardware.
"""

import time

from gpusim.physics import EVENT_GPU_IDLE, EVENT_REASONS_SUPPORTED

NOT_AVAILABLE = "[N/A]"


class BadField(Exception):
    """A field name nvidia-smi does not know."""


def _reason(bit: int):
    return lambda gpu: "Active" if gpu["event_reasons"] & bit else "Not Active"


def _na(gpu):
    return None


# (canonical name, aliases, unit, value of a state snapshot or None for [N/A])
FIELDS = [
    ("timestamp", (), None,
     lambda gpu: time.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(time.time() * 1000) % 1000:03d}"),
    ("driver_version", (), None, lambda gpu: gpu["driver_version"]),
    ("count", (), None, lambda gpu: "1"),
    ("name", ("gpu_name",), None, lambda gpu: gpu["name"]),
    ("serial", ("gpu_serial",), None, lambda gpu: gpu["serial"]),
    ("uuid", ("gpu_uuid",), None, lambda gpu: gpu["uuid"]),
    ("pci.bus_id", ("gpu_bus_id",), None, lambda gpu: gpu["pci_bus_id"]),
    ("pci.domain", (), None, lambda gpu: "0x" + gpu["pci_bus_id"].split(":")[0][-4:]),
    ("pci.bus", (), None, lambda gpu: "0x" + gpu["pci_bus_id"].split(":")[1]),
    ("pci.device", (), None, lambda gpu: "0x" + gpu["pci_bus_id"].split(":")[2][:2]),
    ("index", (), None, lambda gpu: str(gpu["index"])),
    ("display_mode", (), None, lambda gpu: "Disabled"),
    ("display_active", (), None, lambda gpu: "Disabled"),
    ("persistence_mode", (), None,
     lambda gpu: "Enabled" if gpu["persistence_mode"] else "Disabled"),
    ("driver_model.current", (), None, _na),
    ("driver_model.pending", (), None, _na),
    ("compute_mode", (), None, lambda gpu: "Default"),
    ("compute_cap", (), None, lambda gpu: gpu["compute_cap"]),
    ("pstate", (), None, lambda gpu: gpu["pstate"]),
    ("fan.speed", (), "%", _na),
    ("temperature.gpu", (), None, lambda gpu: str(gpu["temp_c"])),
    ("temperature.gpu.tlimit", (), None, lambda gpu: str(gpu["tlimit_margin_c"])),
    ("temperature.memory", (), None, _na),
    ("utilization.gpu", (), "%", lambda gpu: str(gpu["util"])),
    ("utilization.memory", (), "%", lambda gpu: "0"),
    ("memory.total", (), "MiB", _na),
    ("memory.reserved", (), "MiB", _na),
    ("memory.used", (), "MiB", _na),
    ("memory.free", (), "MiB", _na),
    ("ecc.mode.current", (), None, _na),
    ("ecc.mode.pending", (), None, _na),
    ("mig.mode.current", (), None, _na),
    ("mig.mode.pending", (), None, _na),
    ("power.management", (), None, _na),
    ("power.draw", (), "W", lambda gpu: f"{gpu['power_w']:.2f}"),
    ("power.draw.average", (), "W", lambda gpu: f"{gpu['power_w']:.2f}"),
    ("power.draw.instant", (), "W", lambda gpu: f"{gpu['power_w']:.2f}"),
    ("power.limit", (), "W", _na),
    ("enforced.power.limit", (), "W", _na),
    ("power.default_limit", (), "W", _na),
    ("power.min_limit", (), "W", _na),
    ("power.max_limit", (), "W", _na),
    ("clocks.current.graphics", ("clocks.gr",), "MHz", lambda gpu: str(gpu["sm_mhz"])),
    ("clocks.current.sm", ("clocks.sm",), "MHz", lambda gpu: str(gpu["sm_mhz"])),
    ("clocks.current.memory", ("clocks.mem",), "MHz", _na),
    ("clocks.current.video", ("clocks.video",), "MHz", _na),
    ("clocks.applications.graphics", ("clocks.applications.gr",), "MHz",
     lambda gpu: str(gpu["app_sm_mhz"])),
    ("clocks.applications.memory", ("clocks.applications.mem",), "MHz", _na),
    ("clocks.default_applications.graphics", ("clocks.default_applications.gr",), "MHz",
     lambda gpu: str(gpu["app_sm_mhz"])),
    ("clocks.default_applications.memory", ("clocks.default_applications.mem",), "MHz", _na),
    ("clocks.max.graphics", ("clocks.max.gr",), "MHz", lambda gpu: str(gpu["max_sm_mhz"])),
    ("clocks.max.sm", (), "MHz", lambda gpu: str(gpu["max_sm_mhz"])),
    ("clocks.max.memory", ("clocks.max.mem",), "MHz", _na),
    ("clocks_event_reasons.supported", ("clocks_throttle_reasons.supported",), None,
     lambda gpu: f"0x{EVENT_REASONS_SUPPORTED:016X}"),
    ("clocks_event_reasons.active", ("clocks_throttle_reasons.active",), None,
     lambda gpu: f"0x{gpu['event_reasons']:016X}"),
    ("clocks_event_reasons.gpu_idle", ("clocks_throttle_reasons.gpu_idle",), None,
     _reason(EVENT_GPU_IDLE)),
    ("clocks_event_reasons.applications_clocks_setting",
     ("clocks_throttle_reasons.applications_clocks_setting",), None, _reason(0x2)),
    ("clocks_event_reasons.sw_power_cap", ("clocks_throttle_reasons.sw_power_cap",), None,
     _reason(0x4)),
    ("clocks_event_reasons.hw_slowdown", ("clocks_throttle_reasons.hw_slowdown",), None,
     _reason(0x8)),
    ("clocks_event_reasons.hw_thermal_slowdown",
     ("clocks_throttle_reasons.hw_thermal_slowdown",), None, _reason(0x40)),
    ("clocks_event_reasons.hw_power_brake_slowdown",
     ("clocks_throttle_reasons.hw_power_brake_slowdown",), None, _reason(0x80)),
    ("clocks_event_reasons.sync_boost", ("clocks_throttle_reasons.sync_boost",), None,
     _reason(0x10)),
    ("clocks_event_reasons.sw_thermal_slowdown",
     ("clocks_throttle_reasons.sw_thermal_slowdown",), None, _reason(0x20)),
    ("clocks_event_reasons.display_clock_setting",
     ("clocks_throttle_reasons.display_clock_setting",), None, _reason(0x100)),
]

_BY_NAME = {name: entry for entry in FIELDS for name in (entry[0], *entry[1])}


def resolve(names: list[str]) -> list[tuple]:
    """The field entries for the requested names; BadField names the first unknown one."""
    for name in names:
        if name not in _BY_NAME:
            raise BadField(name)
    return [_BY_NAME[name] for name in names]


def csv_header(entries: list[tuple]) -> str:
    """The header line: canonical names, ' [unit]' where the field has a unit."""
    return ", ".join(f"{name} [{unit}]" if unit else name for name, _, unit, _ in entries)


def csv_row(entries: list[tuple], gpu: dict, units: bool) -> str:
    """One GPU's values, with units unless nounits; '[N/A]' for unsupported fields."""
    cells = []
    for _, _, unit, value_of in entries:
        value = value_of(gpu)
        if value is None:
            cells.append(NOT_AVAILABLE)
        else:
            cells.append(f"{value} {unit}" if unit and units else value)
    return ", ".join(cells)
