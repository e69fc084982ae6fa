"""The thresholds that read a stalled group's GPUs hold at the public figures and at the
rehearsal's own physics, uncapped and under the 2,200 MHz lock
(sparkrack/watchdog/thresholds.py)."""

import sys
from pathlib import Path

import pytest

from sparkrack.facts.gpu import GpuSample
from sparkrack.watchdog.culprit import Working, classify, learn
from sparkrack.watchdog.thresholds import FIGURES

SIM_DIR = Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim"
sys.path.insert(0, str(SIM_DIR))

from gpusim.config import GB10_DEFAULTS  # noqa: E402
from gpusim.physics import readings  # noqa: E402


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.state)
def test_each_public_figure_reads_as_what_the_gpu_was_doing(figure):
    working = None if figure.working_w is None else Working(figure.working_w,
                                                            figure.working_mhz)
    sample = GpuSample(figure.util, figure.power_w, figure.sm_mhz)
    assert classify(sample, working) == figure.reads, figure.source


def sample(**reading) -> GpuSample:
    return GpuSample(reading["util"], reading["power_w"], reading["sm_mhz"])


@pytest.mark.parametrize("lock", [None, (0, 2200)], ids=["uncapped", "capped"])
def test_the_rehearsals_gpus_read_as_what_they_do(lock):
    """What the watchdog learns while the group decodes (the median of its samples), then
    a spinning, a drained (stopped host), a decoding and a computing GPU read against it;
    also before anything was learned."""
    def read(kind, util=100, q=0.5):
        return sample(**readings(GB10_DEFAULTS, util, lock, False, resident=True, phase=q,
                                 kind=kind, swing=q))

    decode = [read("decode", q=i / 40) for i in range(41)]
    working = learn(decode)
    assert working is not None
    for q in (0.0, 0.5, 1.0):
        assert classify(read("decode", q=q), working) == "busy" or q == 0.0
    assert classify(read("compute"), working) == "busy"
    assert classify(read("spin", 96), working) == "spinning"
    assert classify(read("drained"), working) == "idle"
    assert classify(read("spin", 96), None) == "spinning"  # the field's "below ~30 W"
    assert classify(read("compute"), None) == "busy"


def test_a_decode_swing_down_alone_is_outvoted_by_the_median_of_three():
    """A decode reading at the bottom of its swing draws as little as a spin; the culprit
    is read from the median of a GPU's last three samples, and only after progress stood
    still for the whole budget, when no GPU decodes."""
    from sparkrack.watchdog.culprit import read_gpus

    def read(q):
        return sample(**readings(GB10_DEFAULTS, 100, (0, 2200), False, resident=True,
                                 phase=q, kind="decode", swing=q))

    working = learn([read(i / 40) for i in range(41)])
    verdict = read_gpus({"a": [read(0.0), read(0.6), read(0.9)],
                         "b": [read(0.5), read(0.5), read(0.5)],
                         "c": [read(0.7), read(0.3), read(0.8)]},
                        {node: working for node in "abc"})
    assert set(verdict.classes.values()) == {"busy"}
