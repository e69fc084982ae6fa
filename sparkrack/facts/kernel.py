"""The host kernel as a node shows it, and whether it breaks RDMA memory registration.

With Kexec HandOver (KHO) on, as 7.0.0-1019-nvidia boots by default, the kernel releases
KHO's scratch pageblocks as CMA without a CMA area of their own: CmaFree reads about 9.5-9.7
GiB above CmaTotal (0, or a small `cma=` area such as 32 MiB), and `ibv_reg_mr` (NCCL over
RoCE) fails with ENOMEM once about 108 GiB is committed, after the weights load; booting with
`kho=off` fixes it (docs/field-notes.md#known-failures-on-sm121). The symptom is judged, not
the release's name: a fixed kernel passes, a broken one under another name does not.
"""

from __future__ import annotations

from dataclasses import dataclass


def kho_off(cmdline: str) -> bool:
    """Whether a kernel command line turns KHO off: its last `kho=` (the kernel parses them
    in order) reads false to the kernel's kstrtobool: n, f, 0, or "of"..."""
    values = [word.partition("=")[2] for word in cmdline.split() if word.startswith("kho=")]
    value = values[-1].lower() if values else ""
    return value[:1] in ("n", "f", "0") or value[:2] == "of"


@dataclass(frozen=True)
class KernelFacts:
    """`uname -r`, /proc/cmdline and the CMA counters of /proc/meminfo (None: not read)."""

    release: str = ""
    cmdline: str | None = None
    cma_total_kb: int | None = None
    cma_free_kb: int | None = None

    @property
    def known(self) -> bool:
        """Whether every fact the judgement needs was read."""
        return bool(self.release) and None not in (
            self.cmdline, self.cma_total_kb, self.cma_free_kb)

    def problem(self) -> str | None:
        """Why this kernel breaks RDMA memory registration, or None (also when not known):
        CmaFree above CmaTotal (free CMA that belongs to no CMA area: KHO's scratch) without
        kho=off, in either public form (CmaTotal 0, or a 32 MiB area)."""
        if not self.known or self.cma_free_kb <= self.cma_total_kb:
            return None
        if kho_off(self.cmdline or ""):
            return None
        return (f"CmaFree {self.cma_free_kb} kB above its CmaTotal {self.cma_total_kb} kB "
                "and no kho=off on its command line (KHO's scratch pageblocks): ibv_reg_mr "
                "fails with ENOMEM once about 108 GiB is committed, after the weights load; "
                "boot it with kho=off")
