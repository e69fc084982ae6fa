"""The simulated GB10's clock and power model against the field report's numbers."""

import sys
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim"
sys.path.insert(0, str(SIM_DIR))

from gpusim.config import GB10_DEFAULTS  # noqa: E402
from gpusim.physics import readings, snap_down  # noqa: E402


def test_driver_snaps_a_2200_cap_down_to_the_2190_bin():
    assert snap_down(2200, GB10_DEFAULTS["clock_bin_mhz"]) == 2190
    assert snap_down(2190, GB10_DEFAULTS["clock_bin_mhz"]) == 2190


def test_rack_of_eight_draws_the_field_report_power_uncapped_and_capped():
    from gpusim.config import unit_figures

    units = [{**GB10_DEFAULTS, **unit_figures(f"spark-{i:02d}")} for i in range(1, 9)]
    uncapped = sum(readings(unit, 100, None, False)["node_power_w"] for unit in units)
    capped = sum(readings(unit, 100, (0, 2200), False)["node_power_w"] for unit in units)
    assert 1700 <= uncapped <= 1770
    assert 1350 <= capped <= 1425


def test_lock_min_raises_the_idle_clock_but_never_the_load_clock():
    idle = readings(GB10_DEFAULTS, 0, (1500, 2200), False)
    busy = readings(GB10_DEFAULTS, 100, (2400, 3003), False)
    assert idle["sm_mhz"] == 1500 and idle["pstate"] == "P0"
    assert busy["sm_mhz"] == GB10_DEFAULTS["load_sm_mhz"]


def test_latched_board_ignores_the_lock_and_stays_low():
    """The public readings of a latched GB10 under load: 481-858 MHz at 5.8-15.8 W."""
    latched = [readings(GB10_DEFAULTS, 100, (0, 2200), True, phase=p / 10) for p in range(11)]
    clocks = {r["sm_mhz"] for r in latched}
    powers = [r["power_w"] for r in latched]
    assert 481 <= min(clocks) < 500 and 840 < max(clocks) <= 858 and len(clocks) > 5
    assert 5.8 <= min(powers) < 6.5 and 15 < max(powers) <= 15.8


def test_a_loaded_gpu_draws_the_public_84_to_89_w_at_its_clock():
    loaded = [readings(GB10_DEFAULTS, 100, None, False, phase=p / 10) for p in range(11)]
    assert all(84 <= r["power_w"] <= 89 for r in loaded), loaded
    assert all(2424 <= r["sm_mhz"] <= 2483 for r in loaded), loaded


def test_each_unit_idles_at_its_own_wall_power_within_the_public_span():
    from gpusim.config import unit_figures

    idles = {readings({**GB10_DEFAULTS, **unit_figures(f"spark-{i:02d}")}, 0, None, False)
             ["node_power_w"] for i in range(1, 9)}
    assert all(25 <= watts <= 37 for watts in idles) and len(idles) > 4, idles


def test_idle_gpu_reports_idle_reason_and_a_few_watts():
    idle = readings(GB10_DEFAULTS, 0, None, False)
    assert idle["event_reasons"] == 0x1 and idle["pstate"] == "P8"
    assert idle["power_w"] < 5


def test_the_loaded_clock_wanders_uncapped_and_sits_under_the_locks_bin():
    uncapped = {readings(GB10_DEFAULTS, 100, None, False, phase=p / 10)["sm_mhz"]
                for p in range(11)}
    assert min(uncapped) == 2425 and max(uncapped) == 2483 and len(uncapped) > 5
    capped = {readings(GB10_DEFAULTS, 100, (0, 2200), False, phase=p / 10)["sm_mhz"]
              for p in range(11)}
    assert min(capped) == 2184 and max(capped) == 2190


def test_an_engine_resident_keeps_an_idle_gpu_at_the_locked_clock():
    """The field figure: a GB10 under -lgc 0,2200 with an engine loaded idles at 2,184-2,190
    MHz, at idle power; without an engine it drops to 208 MHz."""
    resident = readings(GB10_DEFAULTS, 0, (0, 2200), False, resident=True, phase=0.3)
    assert 2184 <= resident["sm_mhz"] <= 2190 and resident["power_w"] < 5
    assert readings(GB10_DEFAULTS, 0, (0, 2200), False, phase=0.3)["sm_mhz"] == 208
    latched = readings(GB10_DEFAULTS, 0, (0, 2200), True, resident=True)
    assert latched["sm_mhz"] == 208


def test_a_gpu_in_hot_air_slows_itself_to_hold_its_t_limit_then_the_hardware_halves_it():
    """40 C more air: the capped load would pass the T.Limit (95 C), so the SW thermal
    slowdown lowers the clock until it holds there; 54 C more: not even half the clock
    holds it, the hardware slowdown halves the clock and the GPU passes its slowdown
    temperature (97 C: 2 C past the T.Limit)."""
    cool = readings(GB10_DEFAULTS, 100, (0, 2200), False)
    assert cool["temp_c"] == 71 and cool["tlimit_margin_c"] == 24 and cool["event_reasons"] == 0
    hot = readings(GB10_DEFAULTS, 100, (0, 2200), False, heat=40)
    assert (hot["temp_c"], hot["tlimit_margin_c"], hot["event_reasons"]) == (95, 0, 0x20)
    assert 1500 < hot["sm_mhz"] < cool["sm_mhz"] and hot["power_w"] < cool["power_w"]
    hotter = readings(GB10_DEFAULTS, 100, (0, 2200), False, heat=54)
    assert hotter["sm_mhz"] == cool["sm_mhz"] // 2 and hotter["event_reasons"] == 0x48
    assert hotter["temp_c"] >= 97
    assert readings(GB10_DEFAULTS, 0, (0, 2200), False, heat=54)["temp_c"] < 95  # idle


def test_serving_spinning_and_drained_gpus_read_as_the_public_figures_say():
    """GB10 public figures (spark-vllm-docker#260, vllm#42354): healthy decode ~45 W on
    average, swinging up to ~90 W; a spinning kernel ~96 % at 16-27 W; a drained GPU (its
    host stopped) 0 % at about a spin's draw, its clock held (an H100 reads 125 W after
    SIGSTOP against 124 W spinning). Uncapped and under the 2,200 MHz lock."""
    from gpusim.physics import decode_share

    quantiles = [q / 100 for q in range(101)]
    mean_share = sum(decode_share(GB10_DEFAULTS, q) for q in quantiles) / len(quantiles)
    assert abs(mean_share - 0.5) < 0.01
    decode = [readings(GB10_DEFAULTS, 100, None, False, kind="decode", swing=q, phase=q)
              for q in quantiles]
    average = sum(r["power_w"] for r in decode) / len(decode)
    assert 43 <= average <= 47 and max(r["power_w"] for r in decode) >= 80
    assert all(90 <= r["util"] <= 99 for r in decode)
    for lock in (None, (0, 2200)):
        spin = readings(GB10_DEFAULTS, 96, lock, False, kind="spin")
        drained = readings(GB10_DEFAULTS, 100, lock, False, kind="drained", resident=True)
        assert spin["util"] == 96 and 16 <= spin["power_w"] <= 27, spin
        assert drained["util"] == 0 and drained["power_w"] == spin["power_w"]
        assert drained["sm_mhz"] == spin["sm_mhz"] and drained["pstate"] == "P0"


def test_a_frozen_cgroup_is_read_from_v1s_freezer_and_v2s_events(tmp_path):
    """docker pause freezes the container's cgroup: its processes read `D` (v1) or `S`
    (v2), so only the cgroup tells; the rehearsal node mounts v1 controllers and v2 at
    /sys/fs/cgroup/unified, a v2-only host at /sys/fs/cgroup."""
    from gpusim.peers import frozen

    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("6:freezer:/docker/abc\n0::/docker/abc\n")
    (root / "freezer" / "docker" / "abc").mkdir(parents=True)
    state = root / "freezer" / "docker" / "abc" / "freezer.state"
    state.write_text("THAWED\n")
    assert not frozen(7, str(proc), str(root))
    state.write_text("FROZEN\n")
    assert frozen(7, str(proc), str(root))
    (proc / "8").mkdir()
    (proc / "8" / "cgroup").write_text("0::/system.slice/docker-def.scope\n")
    (root / "system.slice" / "docker-def.scope").mkdir(parents=True)
    events = root / "system.slice" / "docker-def.scope" / "cgroup.events"
    events.write_text("populated 1\nfrozen 0\n")
    assert not frozen(8, str(proc), str(root))
    events.write_text("populated 1\nfrozen 1\n")
    assert frozen(8, str(proc), str(root))
    assert not frozen(9, str(proc), str(root))  # gone
