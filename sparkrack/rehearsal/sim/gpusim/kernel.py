"""The host kernel the simulated node booted: its command line and what its Kexec HandOver
(KHO) does to the CMA area (pure, and reading the node's file).

/etc/gpu-sim/kernel.json, written by the rack (`rehearsal.kernel`), says which kernel the
node boots: {"release": R, "kho_cma_bug": bool, "cmdline_extra": "kho=off"}; missing, it
is DGX OS's, without the bug. A kernel with KHO's bug (7.0.0-1019-nvidia) releases KHO's
scratch pageblocks as CMA without a registered CMA area: CmaFree reads about 9.7 GiB above
its CmaTotal (0, or the `cma=` area the command line asks for: 32 MiB with `cma=32M`, the
second public form). Memory registration (ibv_reg_mr) pins only while the pool has room
outside those pageblocks: it fails with ENOMEM once about 108 GiB is committed (after the
weights load), not at group init. `kho=off` on its command line boots it without KHO: no
scratch, registration works, as on DGX OS's kernel. Sources: docs/field-notes.md, "Known
failures on SM121".
"""

import json

DGX_OS_KERNEL = "6.17.0-1008-nvidia"
KHO_CMA_FREE_KB = 10171187  # ~9.7 GiB free against a CmaTotal of 0 (NV-Kernels#590)
KHO_PIN_LIMIT_KB = 108 * 1024 * 1024  # committed memory where pins fail (NV-Kernels#591)
REG_MR_ENOMEM = "Cannot allocate memory"
_SIZE = {"k": 1, "m": 1024, "g": 1024 * 1024}


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


def cma_kb(cmdline: str) -> int:
    """The CMA area the command line's last `cma=SIZE` reserves, in kB (0: none)."""
    values = [word.partition("=")[2] for word in cmdline.split() if word.startswith("cma=")]
    value = values[-1].lower() if values else ""
    number, unit = value.rstrip("kmg"), value[len(value.rstrip("kmg")):][:1]
    if not number.isdigit():
        return 0
    return int(number) * _SIZE.get(unit, 0) if unit else int(number) // 1024


def kernel_view(kernel: dict) -> dict:
    """What the booted kernel shows: /proc/cmdline, the CMA counters, the error memory
    registration fails with (None: it works) and the committed memory from which it does."""
    release = str(kernel.get("release") or DGX_OS_KERNEL)
    cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{release} root=/dev/nvme0n1p2 ro quiet splash"
    extra = " ".join(str(kernel.get("cmdline_extra") or "").split())
    cmdline = f"{cmdline} {extra}" if extra else cmdline
    broken = bool(kernel.get("kho_cma_bug")) and not kho_off(cmdline)
    area = cma_kb(cmdline)
    scratch = KHO_CMA_FREE_KB - (area and 210000)  # with an area: ~9.5 GiB (the 2nd form)
    return {"cmdline": cmdline, "cma_total_kb": area,
            "cma_free_kb": area + (scratch if broken else 0),
            "reg_mr_error": REG_MR_ENOMEM if broken else None,
            "reg_mr_limit_kb": KHO_PIN_LIMIT_KB if broken else None}
