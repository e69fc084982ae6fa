"""Progress, not liveness: rank 0's metrics read, the time without progress measured, and the
GPUs' pattern read for the culprit (pure: watchdog/progress.py, watchdog/culprit.py)."""

import shutil
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest

from sparkrack.data import shipped
from sparkrack.engines.serving import engine_serving
from sparkrack.inventory import load_inventory
from sparkrack.watchdog.culprit import GpuSample, Working, learn, read_gpus
from sparkrack.watchdog.progress import StallWatch, reading

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"
SERIES = {engine: engine_serving(REHEARSAL, engine).metrics for engine in ("sglang", "vllm")}

VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="m"}} {waiting}
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="m"}} {generated}
"""


def vllm(running=1, waiting=0, prompt=100, generated=10):
    return reading(SERIES["vllm"], VLLM.format(running=running, waiting=waiting, prompt=prompt,
                                       generated=generated))


def test_the_real_metric_names_are_read_for_each_engine():
    seen = vllm(running=2, waiting=1, generated=7)
    assert (seen.running, seen.waiting, seen.pending) == (2, 1, True)
    sglang = reading(SERIES["sglang"], "# TYPE sglang:num_running_reqs gauge\n"
                     'sglang:num_running_reqs{model_name="m"} 0\n'
                     "# TYPE sglang:generation_tokens_total counter\n"
                     'sglang:generation_tokens_total{model_name="m"} 5\n')
    assert sglang.pending is False and 5 in sglang.marks


def test_an_endpoint_without_the_gauges_gives_no_reading():
    assert reading(SERIES["sglang"], "<html>404</html>") is None
    assert reading(SERIES["vllm"], "# TYPE other gauge\nother 1\n") is None


def test_time_without_progress_counts_only_while_work_is_pending():
    watch = StallWatch()
    assert watch.feed(0.0, vllm(generated=10)) == 0.0
    assert watch.feed(5.0, vllm(generated=10)) == 5.0
    assert watch.feed(9.0, vllm(generated=11)) == 0.0  # a token moved
    assert watch.feed(20.0, vllm(generated=11)) == 11.0
    assert watch.feed(21.0, vllm(running=0, generated=11)) == 0.0  # idle: nothing to judge
    assert watch.feed(50.0, vllm(running=0, generated=11)) == 0.0
    assert watch.feed(51.0, vllm(generated=11)) == 0.0  # work again: counted from here
    assert watch.feed(60.0, vllm(generated=11)) == 9.0


def test_an_unreadable_endpoint_restarts_the_count():
    watch = StallWatch()
    watch.feed(0.0, vllm())
    assert watch.feed(40.0, None) == 0.0
    assert watch.feed(41.0, vllm()) == 0.0


def test_waiting_requests_alone_are_pending_work():
    watch = StallWatch()
    watch.feed(0.0, vllm(running=0, waiting=3))
    assert watch.feed(30.0, vllm(running=0, waiting=3)) == 30.0


def gpus(**nodes):
    return {node: [GpuSample(*sample)] for node, sample in nodes.items()}


def test_the_rank_spinning_at_low_power_among_busy_peers_is_the_culprit():
    verdict = read_gpus(gpus(a=(100, 43.2), b=(100, 43.6), c=(96, 20.1), d=(100, 42.9)))
    assert verdict.culprit == "c" and verdict.alike is None
    assert verdict.classes["c"] == "spinning"
    assert verdict.evidence == ("GPUs spinning 96 % at 20.1 W: c; "
                                "busy 100 % at 42.9-43.6 W: a, b, d")


def test_an_idle_rank_among_busy_peers_and_the_reverse_are_named():
    assert read_gpus(gpus(a=(100, 43), b=(0, 4), c=(100, 44))).culprit == "b"
    assert read_gpus(gpus(a=(0, 4), b=(0, 4), c=(100, 44), d=(0, 4))).culprit == "c"


def test_gpus_all_busy_alike_name_nobody():
    verdict = read_gpus(gpus(a=(100, 43), b=(100, 44), c=(99, 42)))
    assert verdict.alike == "busy" and verdict.culprit is None


@pytest.mark.parametrize("nodes", [
    {"a": (0, 4), "b": (0, 4), "c": (0, 4)},  # all idle: no one stands out
    {"a": (100, 43), "b": (100, 44), "c": (0, 4), "d": (0, 4)},  # two against two
    {"a": (100, 43), "b": (0, 4)},  # two GPUs: either could be the odd one
])
def test_no_culprit_without_one_lone_pattern(nodes):
    verdict = read_gpus(gpus(**nodes))
    assert verdict.culprit is None


def test_the_median_of_recent_samples_outvotes_one_odd_reading():
    samples = {"a": [GpuSample(100, 43), GpuSample(100, 44), GpuSample(100, 43)],
               "b": [GpuSample(100, 43), GpuSample(0, 4), GpuSample(100, 44)],
               "c": [GpuSample(96, 20), GpuSample(96, 21), GpuSample(96, 20)]}
    assert read_gpus(samples).culprit == "c"


def test_a_node_without_a_reading_is_said_and_not_blamed():
    verdict = read_gpus({"a": [GpuSample(100, 43)], "b": [GpuSample(None, None)],
                         "c": [GpuSample(100, 44)], "d": [GpuSample(96, 20)]})
    assert verdict.culprit == "d" and verdict.evidence.endswith("no reading: b")


CLOCK = 2187  # under the 2200 cap


def clocked(**nodes):
    """{node: [GpuSample(util, power, clock)]} with the capped clock unless given."""
    return {node: [GpuSample(*(sample + (CLOCK,) if len(sample) == 2 else sample))]
            for node, sample in nodes.items()}


def test_a_frozen_rank_idles_among_peers_spinning_in_the_collective_and_is_named():
    """The SIGSTOP shape: the stopped host's GPU drains, every peer waits in the collective
    at a fraction of the power it drew while the group worked."""
    working = {node: Working(67.3, CLOCK) for node in "abcd"}
    verdict = read_gpus(clocked(a=(96, 20.4), b=(96, 20.3), c=(0, 3.9), d=(96, 20.5)), working)
    assert verdict.culprit == "c" and verdict.alike is None
    assert verdict.evidence == "GPUs idle 0 % at 3.9 W: c; spinning 96 % at 20.3-20.5 W: a, b, d"


def test_every_gpu_spinning_alike_is_a_stall_with_no_single_rank_to_blame():
    """A fabric or NCCL hang: every rank waits in the collective; no peer is busy to compare
    with, so each GPU is judged against what it drew while the group worked (or, before
    any was seen, the field's "below ~30 W")."""
    spinning = clocked(a=(96, 20.4), b=(96, 20.3), c=(96, 20.5), d=(96, 20.4))
    for working in ({node: Working(67.3, CLOCK) for node in "abcd"}, None):
        verdict = read_gpus(spinning, working)
        assert verdict.alike == "spinning" and verdict.culprit is None


def test_gpus_computing_at_full_power_read_busy_however_the_power_compares():
    busy = clocked(a=(100, 67.1), b=(100, 67.4), c=(100, 66.9))
    assert read_gpus(busy).alike == "busy"
    assert read_gpus(busy, {n: Working(67.2, CLOCK) for n in "abc"}).alike == "busy"
    low_cap = clocked(a=(100, 27.0, 1400), b=(100, 27.5, 1400), c=(100, 27.2, 1400))
    assert read_gpus(low_cap, {n: Working(27.3, 1400) for n in "abc"}).alike == "busy"


def test_a_latched_gpu_computes_slowly_and_a_hot_one_at_a_lower_clock_neither_spins():
    working = {n: Working(67.3, CLOCK) for n in "abc"}
    verdict = read_gpus(clocked(a=(100, 67.2), b=(100, 10.8, 670), c=(100, 38.2, 1674)), working)
    assert verdict.classes == {"a": "busy", "b": "latched", "c": "busy"}
    assert "latched 100 % at 10.8 W, 670 MHz: b" in verdict.evidence


def test_the_working_power_is_learned_from_enough_computing_samples_only():
    samples = [GpuSample(100, 67.0, 2187), GpuSample(100, 68.0, 2184), GpuSample(0, 3.9, 2187),
               GpuSample(100, 10.8, 670), GpuSample(100, 67.5, 2190)]
    assert learn(samples) is None  # three computing readings: too few
    more = samples + [GpuSample(100, 66.0, 2187), GpuSample(95, 40.2, 2187),
                      GpuSample(96, 17.9, 2187)]
    assert learn(more) == Working(67.5, 2187)
    assert learn([GpuSample(0, 3.9, 2187)]) is None


def test_the_working_power_stays_with_the_work_when_spins_creep_into_the_samples():
    """Decode swings as low as a spin, and a rank kept waiting a moment in a collective
    spins while tokens still move: with two samples in five such, the upper quartile still
    reads the work, and a spin later reads as one."""
    decode = [GpuSample(95, watts, 2187) for watts in (19.7, 26.0, 31.5, 38.2, 47.9, 58.0)]
    spins = [GpuSample(96, 17.9, 2187)] * 4
    working = learn(decode + spins)
    assert working.power_w >= 31.5
    assert read_gpus({"a": [GpuSample(96, 17.9, 2187)]}, {"a": working}).classes == {
        "a": "spinning"}


class FakeHead:
    def __init__(self, status, body=b""):
        self.status, self.body = status, body

    def get(self, path, timeout):
        from sparkrack.deployments.headapi import HeadError

        assert path == "/metrics"
        if self.status is None:
            raise HeadError("timed out")
        return self.status, self.body


class FakeFleet:
    """What docker says rank 0's container runs (argv), or no answer (None)."""

    def __init__(self, argv=None):
        self.argv = argv

    def docker(self, node):
        if self.argv is None:
            raise OSError("docker did not answer")
        container = type("C", (), {"argv": tuple(self.argv)})
        return type("D", (), {"container": lambda _, name: container})()


def group_reading(engine: str, head: FakeHead, inventory=None, fleet=None):
    """A GroupWatch whose rank 0 answers as head does (no fleet: progress alone)."""
    from sparkrack.deployments.ranks import Rank
    from sparkrack.watchdog.watch import GroupWatch

    class Probe(GroupWatch):
        head = None

    ranks = [Rank("spark-01", 0, "r0", engine, "512k", "d", "running", None, 120)]
    group = Probe(fleet, inventory or load_inventory(REHEARSAL), ranks, http_port=1,
                  health_path="/health", stall_budget_s=30)
    group.head = head
    return group


def test_a_rank_0_without_metrics_says_what_was_seen_and_no_cause_its_command_rules_out():
    """Issue 56: with the head frozen, `invoke watch` said SGLang serves metrics only with
    --enable-metrics in the profile, which had it. What was seen is said (no answer, or the
    status); the flag is named as the fix only where rank 0's command lacks it."""
    frozen = group_reading("sglang", FakeHead(None), fleet=FakeFleet(["--enable-metrics"]))
    assert frozen._check_progress(None) is None
    assert frozen.unwatched == ("rank 0 on spark-01 gave no answer at /metrics within 2 s: "
                                "its progress is not read while it does not answer")
    lacking = group_reading("sglang", FakeHead(404), fleet=FakeFleet(["--port", "30000"]))
    lacking._check_progress(None)
    assert lacking.unwatched == (
        "rank 0 on spark-01 serves no sglang metrics at /metrics (404): a stalled group is "
        "not seen; sglang serves them only with --enable-metrics, which rank 0 does not run "
        "with (add it to the profile)")
    given = group_reading("sglang", FakeHead(404), fleet=FakeFleet(["--enable-metrics"]))
    given._check_progress(None)
    assert given.unwatched == ("rank 0 on spark-01 serves no sglang metrics at /metrics "
                               "(404): a stalled group is not seen; it runs with "
                               "--enable-metrics")
    unknown = group_reading("sglang", FakeHead(404), fleet=FakeFleet(None))
    unknown._check_progress(None)
    assert unknown.unwatched.endswith("a stalled group is not seen")  # not guessed
    served = group_reading("vllm", FakeHead(200, VLLM.format(
        running=0, waiting=0, prompt=1, generated=1).encode()))
    served._check_progress(None)
    assert served.unwatched is None


def test_progress_decides_a_stall_even_when_every_gpu_computes():
    """Power and utilisation only name a rank: work pending past the budget with nothing
    moving is a stall whatever the GPUs read (a long real prefill moves the KV gauge chunk
    by chunk, so it is not one); every GPU busy names no one."""
    from sparkrack.watchdog.watch import NodeSamples

    group = group_reading("vllm", FakeHead(200, VLLM.format(
        running=1, waiting=0, prompt=1, generated=1).encode()))
    group.stall_budget_s = 0.05
    busy = clocked(a=(100, 67.1), b=(100, 67.4), c=(100, 66.9))
    assert group._check_progress(NodeSamples()) is None
    group.gpus.update({node: deque(samples) for node, samples in busy.items()})
    time.sleep(0.1)
    stall = group._check_progress(NodeSamples())
    assert stall is not None and stall.culprit is None and stall.verdict.alike == "busy"
    assert stall.describe().startswith(
        "group stalled, no single rank to blame (every GPU busy at its working power: one step "
        "longer than the stall budget (a prompt prefilled without chunks?) or a kernel that "
        "loops): 1 running, 0 waiting, no token progress for 0 s (stall budget 0.05 s); GPUs "
        "busy 100 % at 66.9-67.4 W: a, b, c")


def test_a_paused_container_names_its_rank_whatever_the_gpus_say():
    from sparkrack.deployments.ranks import Rank
    from sparkrack.watchdog.stall import blame

    ranks = [Rank(f"spark-0{i + 1}", i, f"r{i}", "vllm", "512k", "d", "running", None, 120)
             for i in range(4)]
    verdict = read_gpus(clocked(**{f"spark-0{i + 1}": (96, 17.9) for i in range(4)}))
    states = [replace(r, status="paused") if r.rank == 2 else r for r in ranks]
    assert blame(ranks, verdict, states) == (ranks[2], "its container is paused (docker "
                                             "pause: the cgroup freezer)")
    assert blame(ranks, verdict, ranks) == (None, None)


def test_a_stall_of_every_gpu_spinning_says_no_single_rank_is_to_blame():
    from sparkrack.watchdog.stall import Stall

    verdict = read_gpus(clocked(a=(96, 20.4), b=(96, 20.3), c=(96, 20.5)))
    stall = Stall(9.0, 8, vllm(), verdict, None)
    assert stall.describe() == (
        "group stalled, no single rank to blame (every GPU spinning: a collective every rank "
        "waits in, as a fabric or NCCL hang leaves it): 1 running, 0 waiting, no token "
        "progress for 9 s (stall budget 8 s); GPUs spinning 96 % at 20.3-20.5 W: a, b, c")
    assert stall.evidence()["alike"] == "spinning" and stall.evidence()["culprit"] is None


def test_the_stall_watch_reads_the_series_the_engine_file_names(tmp_path):
    """Which series are rank 0's running, waiting and progress is the engine file's
    (serving.metrics), an inventory's own file included; and so is the flag an engine
    needs to serve them, which the watch names when none are served."""
    rack = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    (rack / ".sparkrack" / "engines").mkdir(parents=True, exist_ok=True)
    text = (shipped("engines") / "vllm.yml").read_text()
    for old, new in (("vllm:num_requests_running", "site:running"),
                     ("vllm:generation_tokens_total,", "site:tokens_total,"),
                     ("    flag: null", "    flag: --enable-site-metrics")):
        assert old in text
        text = text.replace(old, new)
    (rack / ".sparkrack" / "engines" / "vllm.yml").write_text(text)
    served = (b"# TYPE site:running gauge\nsite:running 1\n"
              b"# TYPE site:tokens_total counter\nsite:tokens_total 5\n")
    from sparkrack.watchdog.watch import NodeSamples

    group = group_reading("vllm", FakeHead(200, served), load_inventory(rack))
    group._check_progress(NodeSamples())
    assert group.unwatched is None and group.progress.last.pending
    assert group.progress.last.marks == (-1.0, 5.0, -1.0)
    shipped_names = group_reading("vllm", FakeHead(200, served), load_inventory(rack))
    shipped_names.head = FakeHead(200, VLLM.format(running=1, waiting=0, prompt=1,
                                                   generated=1).encode())
    shipped_names._check_progress(None)
    assert shipped_names.unwatched == ("rank 0 on spark-01 serves no vllm metrics at /metrics "
                                       "(200): a stalled group is not seen")


def test_only_pending_work_that_moves_is_progress_to_learn_from():
    """The working power is learned from readings that moved since a reading of pending
    work: not from the first reading of a request, which may already hang."""
    watch = StallWatch()
    watch.feed(0.0, vllm(running=0, generated=10))
    watch.feed(1.0, vllm(generated=10))  # work arrives: no progress seen yet
    assert watch.moved is False
    watch.feed(2.0, vllm(generated=11))
    assert watch.moved is True
    watch.feed(3.0, vllm(generated=11))
    assert watch.moved is False
