"""The host kernel the simulated node booted: its command line and what its Kexec HandOver
(KHO) does to the CMA area (pure, and reading the node's file).

/etc/gpu-sim/kernel.json, written by the rack (`rehearsal.kernel`), says which kernel the
node boots: {"release": R, "kho_cma_bug": bool, "cmdline_extra": "kho=off"}; missing, it
is DGX OS's, without the bug. A kernel with KHO's bug (7.0.0-1019-nvidia) boots with
CmaTotal 0 while CmaFree reads about 9.7 GiB, and memory registration (ibv_reg_mr) fails
with ENOMEM; `kho=off` on its command line boots it without KHO: both counters 0 and
registration works, as on DGX OS's kernel.
"""

import json

DGX_OS_KERNEL = "6.17.0-1008-nvidia"
KHO_CMA_FREE_KB = 10171187  # ~9.7 GiB free against a CmaTotal of 0 (NV-Kernels#590)
REG_MR_ENOMEM = "Cannot allocate memory"


def read_kernel(path: str) -> dict:
    """The node's kernel.json ({} when missing or unreadable: DGX OS's kernel)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def kho_off(cmdline: str) -> bool:
    """Whether the command line turns KHO off: the last `kho=` reads false to kstrtobool."""
    values = [word.partition("=")[2] for word in cmdline.split() if word.startswith("kho=")]
    value = values[-1].lower() if values else ""
    return value[:1] in ("n", "f", "0") or value[:2] == "of"


def kernel_view(kernel: dict) -> dict:
    """What the booted kernel shows: /proc/cmdline, the CMA counters, and the error memory
    registration fails with (None: it works)."""
    release = str(kernel.get("release") or DGX_OS_KERNEL)
    cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{release} root=/dev/nvme0n1p2 ro quiet splash"
    extra = " ".join(str(kernel.get("cmdline_extra") or "").split())
    cmdline = f"{cmdline} {extra}" if extra else cmdline
    broken = bool(kernel.get("kho_cma_bug")) and not kho_off(cmdline)
    return {"cmdline": cmdline, "cma_total_kb": 0,
            "cma_free_kb": KHO_CMA_FREE_KB if broken else 0,
            "reg_mr_error": REG_MR_ENOMEM if broken else None}
