"""What the simulated GB10 reads for a given load, clock lock and latch state (pure): clock,
power and temperature, thermal slowdowns included (docs/rehearsal.md#the-simulators).
"""

EVENT_GPU_IDLE = 0x1
EVENT_HW_SLOWDOWN = 0x8
EVENT_SW_THERMAL = 0x20
EVENT_HW_THERMAL = 0x40
EVENT_REASONS_SUPPORTED = 0x1FF


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


def dynamic_share(config: dict, util: int, clock: int, latched: bool,
                  spinning: bool = False) -> float:
    """Fraction (0-1) of the idle-to-full-load power span drawn right now (a spinning
    kernel: at most spin_power_share, whatever the utilization reads)."""
    if util <= 0:
        return 0.0
    if spinning:
        return min(config["spin_power_share"], util / 100)
    if latched:  # the latched draw follows the latched clock over its span
        span = config["gpu_load_w"] - config["gpu_idle_w"]
        offset = (clock - config["latched_sm_mhz"]) / config["latched_sm_spread_mhz"]
        watts = config["latched_gpu_w"] + config["latched_gpu_spread_w"] * offset
        per_util = (watts - config["gpu_idle_w"]) / span
    else:
        per_util = (clock / config["load_sm_mhz"]) ** config["power_clock_exponent"]
    return util / 100 * per_util


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
             resident: bool = False, phase: float = 0.5, spinning: bool = False,
             heat: float = 0.0) -> dict:
    """Clocks, power, temperature, pstate and event reasons, as the driver would report
    (spinning: the load that sets util is a spin, busy at low power; heat: degrees the air
    around the board is above the usual)."""
    clock = sm_clock(config, util, lock, latched, resident, phase)
    share = dynamic_share(config, util, clock, latched, spinning)
    gpu_w, node_w = _power_w(config, share)
    air = config["ambient_c"] + heat
    reasons = 0 if util > 0 else EVENT_GPU_IDLE
    if util > 0 and air + gpu_w * config["temp_c_per_w"] > config["tlimit_c"]:
        clock, reasons = _thermal_clock(config, util, clock, heat)
        gpu_w, node_w = _power_w(config, dynamic_share(config, util, clock, latched, spinning))
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
