"""The host kernel as a node shows it, and whether it breaks RDMA memory registration.

On 7.0.0-1019-nvidia, Kexec HandOver (KHO) leaves the CMA area unaccounted: CmaTotal reads
0 while CmaFree reads several GiB, and `ibv_reg_mr` (NCCL over RoCE) fails with ENOMEM;
booting with `kho=off` fixes it (docs/field-notes.md). The symptom is judged, not the
release's name: a fixed kernel passes, a broken one under another name does not.
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
        """Why this kernel breaks RDMA memory registration, or None (also when not known)."""
        if not self.known or self.cma_total_kb != 0 or not self.cma_free_kb:
            return None
        if kho_off(self.cmdline or ""):
            return None
        return (f"CmaTotal 0 kB with CmaFree {self.cma_free_kb} kB and no kho=off on its "
                "command line (KHO): ibv_reg_mr fails with ENOMEM; boot it with kho=off")
