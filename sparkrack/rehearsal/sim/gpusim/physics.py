"""What the simulated GB10 reads for a given load, clock lock and latch state (pure): clock,
power and temperature, thermal slowdowns included (docs/rehearsal.md#the-simulators).

A load is one of KINDS: `compute` (matmuls back to back: a burn, a long prefill), `decode`
(healthy serving: busy, its power swinging about a mean near half the load span), `spin`
(a kernel polling a flag: busy at a spin's draw) or `drained` (no kernel left, the host
stopped feeding it: 0 % at a spin's draw, the clock held).
"""

EVENT_GPU_IDLE = 0x1
EVENT_HW_SLOWDOWN = 0x8
EVENT_SW_THERMAL = 0x20
EVENT_HW_THERMAL = 0x40
EVENT_REASONS_SUPPORTED = 0x1FF
KINDS = ("compute", "decode", "spin", "drained")


def snap_down(mhz: int, bin_mhz: int) -> int:
    """The driver's clock bin at or below mhz."""
    return (mhz // bin_mhz) * bin_mhz


def sm_clock(config: dict, util: int, lock: tuple[int, int] | None, latched: bool,
             resident: bool = False, phase: float = 0.5) -> int:
    """SM clock in MHz for this utilization (0-100), lock (min, max), latch state, whether
    an engine holds memory on the GPU (resident), and where in its wander the clock is
    (phase, 0-1). Under load the clock wanders over load_sm_spread_mhz around the boost
    clock (2,425-2,483 MHz uncapped); a lock holds it within lock_wander_mhz under the
    lock's bin (2,184-2,190 MHz under 2200). A latched board wanders over its latched
    span instead (482-858 MHz). With an engine resident an idle GPU stays there too; an
    empty one drops to its idle clock (the lock's min raises that floor)."""
    boost = config["load_sm_mhz"]
    spread = config["load_sm_spread_mhz"]
    natural = boost + round(spread * (0.5 - phase))
    cap = snap_down(lock[1], config["clock_bin_mhz"]) if lock else None
    if cap is not None:
        cap -= round(config["lock_wander_mhz"] * phase)
    if util > 0 or (resident and not latched):
        if latched:
            natural = config["latched_sm_mhz"] + round(
                config["latched_sm_spread_mhz"] * (0.5 - phase))
        return natural if cap is None else min(natural, cap)
    floor = snap_down(lock[0], config["clock_bin_mhz"]) if lock else 0
    return min(max(config["idle_sm_mhz"], floor), cap if cap is not None else boost, boost)


def clock_factor(config: dict, clock: int) -> float:
    """How power above idle scales with the clock: (clock / boost clock) ** exponent."""
    return (clock / config["load_sm_mhz"]) ** config["power_clock_exponent"]


def decode_share(config: dict, swing: float) -> float:
    """The share of the load span a decoding GPU draws at quantile swing (0-1) of its
    swings: a triangle from low (the mode) up to high (decode_share: low, mode, high)."""
    low, mode, high = config["decode_share"]
    swing = min(1.0, max(0.0, swing))
    if high == low:
        return low
    edge = (mode - low) / (high - low)
    if swing < edge:
        return low + ((high - low) * (mode - low) * swing) ** 0.5
    return high - ((high - low) * (high - mode) * (1 - swing)) ** 0.5


def dynamic_share(config: dict, util: int, clock: int, latched: bool,
                  kind: str = "compute", swing: float = 0.5) -> float:
    """Fraction (0-1) of the idle-to-full-load power span drawn right now (a spin, and a
    drained GPU whose clock is held, draw spin_power_share of it at the boost clock)."""
    if kind == "drained":
        return config["spin_power_share"] * clock_factor(config, clock)
    if util <= 0:
        return 0.0
    if kind == "spin":
        return min(config["spin_power_share"], util / 100) * clock_factor(config, clock)
    if latched:  # the latched draw follows the latched clock over its span
        span = config["gpu_load_w"] - config["gpu_idle_w"]
        offset = (clock - config["latched_sm_mhz"]) / config["latched_sm_spread_mhz"]
        watts = config["latched_gpu_w"] + config["latched_gpu_spread_w"] * offset
        return util / 100 * (watts - config["gpu_idle_w"]) / span
    if kind == "decode":
        return decode_share(config, swing) * clock_factor(config, clock)
    return util / 100 * clock_factor(config, clock)


def limited_clock(config: dict, clock: int, share: float, limit_w: float) -> int:
    """The clock at which a load drawing share of the span at clock fits under limit_w (a
    firmware power limit: the draw above idle follows clock ** power_clock_exponent),
    snapped down to its bin, never under the idle clock; clock itself when it fits."""
    span = config["gpu_load_w"] - config["gpu_idle_w"]
    target = (limit_w - config["gpu_idle_w"]) / span
    if share <= 0 or config["gpu_idle_w"] + span * share <= limit_w:
        return clock
    if target <= 0:
        return config["idle_sm_mhz"]
    fitted = clock * (target / share) ** (1 / config["power_clock_exponent"])
    return max(config["idle_sm_mhz"], snap_down(int(fitted), config["clock_bin_mhz"]))


def pace(config: dict, lock: tuple[int, int] | None, limit_w: float | None) -> float:
    """How fast the GPU computes against its pace without the power limit (0-1]: the
    clock a full compute load holds under limit_w over the one it holds without it (a
    rank's steps take longer in that proportion, and its TP group's with them)."""
    if limit_w is None:
        return 1.0
    clock = sm_clock(config, 100, lock, False)
    held = limited_clock(config, clock, dynamic_share(config, 100, clock, False), limit_w)
    return held / clock


def _power_w(config: dict, share: float) -> tuple[float, float]:
    """(GPU watts, node watts) at this share of the load span."""
    gpu_w = config["gpu_idle_w"] + (config["gpu_load_w"] - config["gpu_idle_w"]) * share
    node_w = config["node_idle_w"] + (config["node_load_w"] - config["node_idle_w"]) * share
    return gpu_w, node_w


def _thermal_clock(config: dict, util: int, clock: int, heat: float) -> tuple[int, int]:
    """(clock, event reasons) of a computing GPU once its thermal slowdown acts."""
    air = config["ambient_c"] + heat
    limit = config["tlimit_c"]
    watts = (limit - air) / config["temp_c_per_w"]  # what holds the GPU at its T.Limit
    share = (watts - config["gpu_idle_w"]) / (config["gpu_load_w"] - config["gpu_idle_w"])
    held = 0 if share <= 0 else round(
        config["load_sm_mhz"] * (share / (util / 100)) ** (1 / config["power_clock_exponent"]))
    if held >= clock // 2:
        return min(held, clock), EVENT_SW_THERMAL
    return clock // 2, EVENT_HW_SLOWDOWN | EVENT_HW_THERMAL


def readings(config: dict, util: int, lock: tuple[int, int] | None, latched: bool,
             resident: bool = False, phase: float = 0.5, kind: str = "compute",
             heat: float = 0.0, swing: float = 0.5, limit_w: float | None = None) -> dict:
    """Clocks, power, temperature, pstate and event reasons, as the driver would report
    (kind: what the load that sets util does, KINDS; heat: degrees the air around the board
    is above the usual; swing: where a decoding GPU is in its power swings, 0-1; limit_w:
    the firmware's power limit: a clock ceiling at which a full load's draw fits, whatever
    the load, no event reason saying so)."""
    if kind == "drained":  # nothing runs, the clock stays where the work left it
        util = 0
    elif kind == "decode" and util > 0:
        low, high = config["decode_util"]
        util = round(low + (high - low) * phase)
    clock = sm_clock(config, 100 if kind == "drained" else util, lock, latched, resident, phase)
    share = dynamic_share(config, util, clock, latched, kind, swing)
    if limit_w is not None and util > 0 and not latched:  # a ceiling a full load fits under
        clock = limited_clock(config, clock, dynamic_share(config, 100, clock, False), limit_w)
        share = dynamic_share(config, util, clock, latched, kind, swing)
    gpu_w, node_w = _power_w(config, share)
    air = config["ambient_c"] + heat
    reasons = 0 if util > 0 else EVENT_GPU_IDLE
    if util > 0 and air + gpu_w * config["temp_c_per_w"] > config["tlimit_c"]:
        clock, reasons = _thermal_clock(config, util, clock, heat)
        gpu_w, node_w = _power_w(config, dynamic_share(config, util, clock, latched, kind,
                                                       swing))
    temperature = air + gpu_w * config["temp_c_per_w"]
    if reasons == EVENT_SW_THERMAL:
        temperature = min(temperature, config["tlimit_c"])
    return {
        "util": util,
        "sm_mhz": clock,
        "power_w": round(gpu_w, 2),
        "node_power_w": round(node_w, 1),
        "temp_c": round(temperature),
        "tlimit_margin_c": round(config["tlimit_c"] - temperature),
        "pstate": "P0" if util > 0 or clock > config["idle_sm_mhz"] else "P8",
        "event_reasons": reasons,
    }
