"""The plain `nvidia-smi` summary table and the `-L` line, as a GB10 prints them.

GB10 specifics: memory usage 'Not Supported', power cap 'N/A', ECC and MIG 'N/A'.
Column widths follow the 580 driver's table (91 characters wide).
"""

import time

RULE = "+-----------------------------------------------------------------------------------------+"
CELL_RULE = "+-----------------------------------------+------------------------+----------------------+"


def list_line(gpu: dict) -> str:
    """The -L line: 'GPU 0: NVIDIA GB10 (UUID: GPU-...)'."""
    return f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})"


def _process_row(process: dict) -> str:
    name = process["name"]
    if len(name) > 32:
        name = "..." + name[-29:]
    return (f"|{0:>5}{'N/A':>6}{'N/A':>5}{process['pid']:>16}{'C':>7}   "
            f"{name:<32}{process['used_mib']:>11}MiB |")


def render_table(gpu: dict) -> str:
    """The full summary: header, one GPU block, the process table."""
    pm = "On" if gpu["persistence_mode"] else "Off"
    usage = f"{round(gpu['power_w'])}W"
    lines = [
        time.asctime() + "       ",
        RULE,
        f"| NVIDIA-SMI {gpu['driver_version']:<22} Driver Version: {gpu['driver_version']:<14} "
        f"CUDA Version: {gpu['cuda_version']:<9}|",
        CELL_RULE,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
        f"|{gpu['index']:>4}  {gpu['name']:<30}{pm:>3}  |   {gpu['pci_bus_id']} Off |{'N/A':>21} |",
        f"| N/A  {gpu['temp_c']:>3}C    {gpu['pstate']:<2}{usage:>16} /  N/A  | Not Supported          |"
        f"{gpu['util']:>7}%      Default |",
        f"|                                         |                        |{'N/A':>21} |",
        CELL_RULE,
        "",
        RULE,
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
    ]
    if gpu["processes"]:
        lines += [_process_row(process) for process in gpu["processes"]]
    else:
        lines.append("|  No running processes found                                                             |")
    lines.append(RULE)
    return "\n".join(lines) + "\n"
