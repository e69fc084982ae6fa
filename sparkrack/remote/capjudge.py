"""The burn check's judge: the sampler's output parsed, and the verdict on a GPU's clock
under load (ok, UNCAPPED, LATCHED, NO LOAD). One implementation for every place that
judges: `invoke burn` over SSH (sparkrack/safety/burn.py) and the Kubernetes node agent in
its pod (capagent.py). Stdlib only, Python 3.7 or later, no `from __future__` (it is
composed into other node scripts)."""

import dataclasses
from typing import List, Optional, Sequence, Tuple

LATCH_MHZ = 1000  # a GB10 latched in its low-clock state runs ~500-850 MHz under load
# The lowest cap a burn tells from a latched GPU: LATCH_MHZ and room for the driver's clock
# step, which a lock is snapped down to (2,200 -> 2,190)
CAP_FLOOR_MHZ = 1100
BUSY_PERCENT = 50  # a sample counts as "under load" at this utilization or more
SAMPLE_SECONDS = 0.5
BUSY_SAMPLES = 2  # the load runs again (at most LOAD_RUNS times) until this many samples
LOAD_RUNS = 3  # were taken while the GPU was busy: a slow sampler on a busy host still sees it
SAMPLE_FIELDS = "clocks.sm,power.draw,utilization.gpu"
OK, UNCAPPED, LATCHED, NO_LOAD, UNREACHABLE = "ok", "UNCAPPED", "LATCHED", "NO LOAD", \
    "UNREACHABLE"
BAD_CAP = "BAD CAP"  # a cap no burn can prove: at or above the GPU's maximum clock, or too low


@dataclasses.dataclass(frozen=True)
class Sample:
    """One nvidia-smi reading during the burn."""

    time: float
    sm_mhz: Optional[int]
    power_w: Optional[float]
    util_pct: Optional[int]


def parse_output(text: str) -> Tuple[str, List[Sample], Optional[int], str]:
    """(boot id, samples, load exit code, load output tail) from the burn script's output."""
    lines = text.splitlines()
    boot_id = lines[0].strip() if lines else ""
    samples, rc, tail = [], None, []
    for line in lines[1:]:
        if line.startswith("S "):
            parts = line[2:].split(" ", 1)
            values = [v.strip() for v in (parts[1] if len(parts) > 1 else "").split(",")]
            if len(values) == 3:
                samples.append(Sample(_float(parts[0]) or 0.0, _int(values[0]),
                                      _float(values[1]), _int(values[2])))
        elif line.startswith("RC "):
            rc = _int(line[3:])
        elif line.startswith("L "):
            tail.append(line[2:])
    return boot_id, samples, rc, "\n".join(tail).strip()


def max_clock(text: str) -> Optional[int]:
    """The GPU's maximum SM clock (clocks.max.sm) the burn script read before its load (its
    `M ` line), or None when it gave none."""
    for line in text.splitlines():
        if line.startswith("M "):
            return _int(line[2:].strip())
    return None


def cap_problem(cap_mhz: int, max_mhz: Optional[int]) -> Optional[str]:
    """Why no burn can prove cap_mhz on a GPU whose maximum SM clock is max_mhz, or None: at
    or above that maximum no clock under load exceeds it, so the cap looks like no cap; under
    CAP_FLOOR_MHZ a GPU held at the cap reads as latched."""
    if max_mhz is not None and cap_mhz >= max_mhz:
        return ("the %d MHz cap is at or above this GPU's maximum SM clock (%d MHz, "
                "clocks.max.sm): no clock under load can exceed it, so a burn cannot tell the "
                "cap from no cap; set clock_cap_mhz below it (the field runs 2200)"
                % (cap_mhz, max_mhz))
    if cap_mhz < CAP_FLOOR_MHZ:
        return ("the %d MHz cap is under %d MHz: a GPU held there under load reads as latched "
                "(under %d MHz), so a burn cannot tell the cap from the latched state; set "
                "clock_cap_mhz to %d or more (the field runs 2200)"
                % (cap_mhz, CAP_FLOOR_MHZ, LATCH_MHZ, CAP_FLOOR_MHZ))
    return None


def judge(samples: Sequence[Sample], cap_mhz: int, load_rc: Optional[int] = 0,
          load_output: str = "", max_mhz: Optional[int] = None
          ) -> Tuple[str, str, Optional[int], Optional[float]]:
    """(verdict, reason, max SM MHz under load, max power W under load) from samples;
    max_mhz: the GPU's maximum SM clock (BAD CAP when cap_problem says so)."""
    busy = [s for s in samples if s.util_pct is not None and s.util_pct >= BUSY_PERCENT
            and s.sm_mhz is not None]
    bad_cap = cap_problem(cap_mhz, max_mhz)
    if bad_cap:
        top = max((s.sm_mhz for s in busy), default=None)
        return BAD_CAP, bad_cap, top, max((s.power_w for s in busy if s.power_w is not None),
                                          default=None)
    if not busy:
        why = f"load exited {load_rc}" if load_rc else "no sample showed the GPU busy"
        detail = f": {load_output.splitlines()[-1]}" if load_output.strip() else ""
        return NO_LOAD, f"the GPU never went under load ({why}{detail})", None, None
    max_sm = max(s.sm_mhz for s in busy)
    powers = [s.power_w for s in busy if s.power_w is not None]
    max_power = max(powers) if powers else None
    power = f", {max_power:.0f} W" if max_power is not None else ""
    if max_sm > cap_mhz:
        reason = (f"SM clock reached {max_sm} MHz under load, above the {cap_mhz} MHz "
                  f"cap{power}: the cap does not hold (restart sparkrack-clock-cap.service on "
                  "the node if something reset the clocks; invoke provision --role clock_cap "
                  "if the unit is missing or failed)")
        return UNCAPPED, reason, max_sm, max_power
    if max_sm < LATCH_MHZ:
        reason = (f"SM clock at most {max_sm} MHz under load{power}: the GPU is latched in "
                  "its low-clock state; needs a full power removal (unplug the node, wait, "
                  "plug it back)")
        return LATCHED, reason, max_sm, max_power
    return OK, f"max {max_sm} MHz <= cap {cap_mhz} MHz under load{power}", max_sm, max_power


def _int(text: str) -> Optional[int]:
    try:
        return int(float(text))
    except ValueError:
        return None


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None
