"""`nvidia-smi -q [-d TYPES]` text for a GB10, in the driver's layout.

Labels are indented by 4 spaces per level and padded to column 55 before ': '. Sections
keep the driver's order whatever order -d lists them in; -d adds the Samples blocks.
The locked clock range appears nowhere (no -q section reports it on real hardware).
"""

import time

SAMPLE_LABELS = ("Duration", "Number of Samples", "Max", "Min", "Avg")


def _line(depth: int, label: str, value: str | None = None) -> str:
    text = "    " * depth + label
    return text if value is None else f"{text:<55}: {value}"


def _performance(gpu: dict, with_samples: bool) -> list[str]:
    def reason(bit: int) -> str:
        return "Active" if gpu["event_reasons"] & bit else "Not Active"

    return [
        _line(1, "Performance State", gpu["pstate"]),
        _line(1, "Clocks Event Reasons"),
        _line(2, "Idle", reason(0x1)),
        _line(2, "Applications Clocks Setting", reason(0x2)),
        _line(2, "SW Power Cap", reason(0x4)),
        _line(2, "HW Slowdown", reason(0x8)),
        _line(3, "HW Thermal Slowdown", reason(0x40)),
        _line(3, "HW Power Brake Slowdown", reason(0x80)),
        _line(2, "Sync Boost", reason(0x10)),
        _line(2, "SW Thermal Slowdown", reason(0x20)),
        _line(2, "Display Clock Setting", reason(0x100)),
        _line(1, "Clocks Event Reasons Counters"),
        *(_line(2, label, "0 us") for label in (
            "SW Power Capping", "Sync Boost", "SW Thermal Slowdown", "HW Thermal Slowdown",
            "HW Power Braking")),
        _line(1, "Sparse Operation Mode", "Disabled"),
    ]


def _memory(gpu: dict, with_samples: bool) -> list[str]:
    return [
        _line(1, "FB Memory Usage"),
        *(_line(2, label, "N/A") for label in ("Total", "Reserved", "Used", "Free")),
        _line(1, "BAR1 Memory Usage"),
        *(_line(2, label, "N/A") for label in ("Total", "Used", "Free")),
        _line(1, "Conf Compute Protected Memory Usage"),
        *(_line(2, label, "0 MiB") for label in ("Total", "Used", "Free")),
    ]


def _utilization(gpu: dict, with_samples: bool) -> list[str]:
    return [
        _line(1, "Utilization"),
        _line(2, "GPU", f"{gpu['util']} %"),
        *(_line(2, label, "0 %") for label in ("Memory", "Encoder", "Decoder", "JPEG", "OFA")),
    ]


def _temperature(gpu: dict, with_samples: bool) -> list[str]:
    """Driver 580's labels: thresholds as offsets from the T.Limit (GB10's public output
    shows the first four lines; the rest are N/A here, unverified)."""
    thermal = gpu["thermal"]
    return [
        _line(1, "Temperature"),
        _line(2, "GPU Current Temp", f"{gpu['temp_c']} C"),
        _line(2, "GPU T.Limit Temp", f"{gpu['tlimit_margin_c']} C"),
        _line(2, "GPU Shutdown T.Limit Temp", f"{thermal['shutdown_tlimit_c']} C"),
        _line(2, "GPU Slowdown T.Limit Temp", f"{thermal['slowdown_tlimit_c']} C"),
        *(_line(2, label, "N/A") for label in (
            "GPU Max Operating T.Limit Temp", "GPU Target Temperature", "Memory Current Temp",
            "Memory Max Operating T.Limit Temp")),
    ]


def _power(gpu: dict, with_samples: bool) -> list[str]:
    draw = f"{gpu['power_w']:.2f} W"
    limits = ("Current Power Limit", "Requested Power Limit", "Default Power Limit",
              "Min Power Limit", "Max Power Limit")
    lines = [
        _line(1, "GPU Power Readings"),
        _line(2, "Average Power Draw", draw),
        _line(2, "Instantaneous Power Draw", draw),
        *(_line(2, label, "N/A") for label in limits),
    ]
    if with_samples:
        lines += [_line(1, "Power Samples"),
                  *(_line(2, label, "Not Found") for label in SAMPLE_LABELS)]
    return lines + [
        _line(1, "GPU Memory Power Readings "),
        _line(2, "Average Power Draw", "N/A"),
        _line(2, "Instantaneous Power Draw", "N/A"),
        _line(1, "Module Power Readings"),
        *(_line(2, label, "N/A") for label in (
            "Average Power Draw", "Instantaneous Power Draw", *limits)),
    ]


def _clock(gpu: dict, with_samples: bool) -> list[str]:
    current = f"{gpu['sm_mhz']} MHz"
    app, top = f"{gpu['app_sm_mhz']} MHz", f"{gpu['max_sm_mhz']} MHz"
    lines = [
        _line(1, "Clocks"),
        _line(2, "Graphics", current), _line(2, "SM", current),
        _line(2, "Memory", "N/A"), _line(2, "Video", "N/A"),
        _line(1, "Applications Clocks"),
        _line(2, "Graphics", app), _line(2, "Memory", "N/A"),
        _line(1, "Default Applications Clocks"),
        _line(2, "Graphics", app), _line(2, "Memory", "N/A"),
        _line(1, "Deferred Clocks"),
        _line(2, "Memory", "N/A"),
        _line(1, "Max Clocks"),
        _line(2, "Graphics", top), _line(2, "SM", top),
        _line(2, "Memory", "N/A"), _line(2, "Video", "N/A"),
        _line(1, "Max Customer Boost Clocks"),
        _line(2, "Graphics", "N/A"),
    ]
    if with_samples:
        for block in ("SM Clock Samples", "Memory Clock Samples"):
            lines += [_line(1, block), *(_line(2, label, "Not Found") for label in SAMPLE_LABELS)]
    return lines + [
        _line(1, "Clock Policy"),
        _line(2, "Auto Boost", "N/A"),
        _line(2, "Auto Boost Default", "N/A"),
    ]


SECTIONS = {
    "PERFORMANCE": _performance,
    "MEMORY": _memory,
    "UTILIZATION": _utilization,
    "TEMPERATURE": _temperature,
    "POWER": _power,
    "CLOCK": _clock,
}


def _identity(gpu: dict) -> list[str]:
    domain, bus, device = gpu["pci_bus_id"].split(":")
    return [
        _line(1, "Product Name", gpu["name"]),
        _line(1, "Product Brand", "NVIDIA"),
        _line(1, "Product Architecture", "Blackwell"),
        _line(1, "Display Attached", "No"),
        _line(1, "Display Active", "Disabled"),
        _line(1, "Persistence Mode", "Enabled" if gpu["persistence_mode"] else "Disabled"),
        _line(1, "Addressing Mode", "ATS"),
        _line(1, "MIG Mode"),
        _line(2, "Current", "N/A"), _line(2, "Pending", "N/A"),
        _line(1, "Accounting Mode", "Disabled"),
        _line(1, "Accounting Mode Buffer Size", "4000"),
        _line(1, "Driver Model"),
        _line(2, "Current", "N/A"), _line(2, "Pending", "N/A"),
        _line(1, "Serial Number", gpu["serial"]),
        _line(1, "GPU UUID", gpu["uuid"]),
        _line(1, "Minor Number", str(gpu["index"])),
        _line(1, "MultiGPU Board", "No"),
        _line(1, "PCI"),
        _line(2, "Bus", f"0x{bus}"),
        _line(2, "Device", f"0x{device[:2]}"),
        _line(2, "Domain", f"0x{domain[-4:]}"),
        _line(2, "Bus Id", gpu["pci_bus_id"]),
        _line(1, "Fan Speed", "N/A"),
    ]


def _processes(gpu: dict) -> list[str]:
    if not gpu["processes"]:
        return [_line(1, "Processes", "None")]
    lines = [_line(1, "Processes")]
    for process in gpu["processes"]:
        lines += [
            _line(2, "GPU instance ID", "N/A"),
            _line(2, "Compute instance ID", "N/A"),
            _line(2, "Process ID", str(process["pid"])),
            _line(3, "Type", "C"),
            _line(3, "Name", process["name"]),
            _line(3, "Used GPU Memory", f"{process['used_mib']} MiB"),
        ]
    return lines


def render_query(gpu: dict, displays: list[str] | None) -> str:
    """The whole -q text; `displays` are -d types (already validated) or None for all."""
    chosen = set(displays or ())
    body = []
    if displays is None:
        body += _identity(gpu)
    for name in ("PERFORMANCE", "MEMORY"):
        if displays is None or name in chosen:
            body += SECTIONS[name](gpu, displays is not None)
    if displays is None:
        body.append(_line(1, "Compute Mode", "Default"))
    for name in ("UTILIZATION", "TEMPERATURE", "POWER", "CLOCK"):
        if displays is None or name in chosen:
            body += SECTIONS[name](gpu, displays is not None)
    if displays is None:
        body += _processes(gpu)
    header = [
        "",
        "==============NVSMI LOG==============",
        "",
        _line(0, "Timestamp", time.asctime()),
        _line(0, "Driver Version", gpu["driver_version"]),
        _line(0, "CUDA Version", gpu["cuda_version"]),
        "",
        _line(0, "Attached GPUs", "1"),
        f"GPU {gpu['pci_bus_id']}",
    ]
    return "\n".join(header + body) + "\n\n"
