"""Progress, not liveness: rank 0's metrics read, the time without progress measured, and the
GPUs' pattern read for the culprit (pure: lifecycle/progress.py, lifecycle/culprit.py)."""

import pytest

from sparkrack.lifecycle.culprit import GpuSample, read_gpus
from sparkrack.lifecycle.progress import StallWatch, reading

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
    return reading("vllm", VLLM.format(running=running, waiting=waiting, prompt=prompt,
                                       generated=generated))


def test_the_real_metric_names_are_read_for_each_engine():
    seen = vllm(running=2, waiting=1, generated=7)
    assert (seen.running, seen.waiting, seen.pending) == (2, 1, True)
    sglang = reading("sglang", "# TYPE sglang:num_running_reqs gauge\n"
                     'sglang:num_running_reqs{model_name="m"} 0\n'
                     "# TYPE sglang:generation_tokens_total counter\n"
                     'sglang:generation_tokens_total{model_name="m"} 5\n')
    assert sglang.pending is False and 5 in sglang.marks


def test_an_endpoint_without_the_gauges_gives_no_reading():
    assert reading("sglang", "<html>404</html>") is None
    assert reading("vllm", "# TYPE other gauge\nother 1\n") is None


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
    assert verdict.culprit == "c" and not verdict.working
    assert verdict.classes["c"] == "spinning"
    assert verdict.evidence == ("GPUs spinning 96 % at 20.1 W: c; "
                                "busy 100 % at 42.9-43.6 W: a, b, d")


def test_an_idle_rank_among_busy_peers_and_the_reverse_are_named():
    assert read_gpus(gpus(a=(100, 43), b=(0, 4), c=(100, 44))).culprit == "b"
    assert read_gpus(gpus(a=(0, 4), b=(0, 4), c=(100, 44), d=(0, 4))).culprit == "c"


def test_gpus_all_busy_alike_are_working_and_name_nobody():
    verdict = read_gpus(gpus(a=(100, 43), b=(100, 44), c=(99, 42)))
    assert verdict.working and verdict.culprit is None


@pytest.mark.parametrize("nodes", [
    {"a": (0, 4), "b": (0, 4), "c": (0, 4)},  # all idle: no one stands out
    {"a": (100, 43), "b": (100, 44), "c": (0, 4), "d": (0, 4)},  # two against two
    {"a": (100, 43), "b": (0, 4)},  # two GPUs: either could be the odd one
])
def test_no_culprit_without_one_lone_pattern(nodes):
    verdict = read_gpus(gpus(**nodes))
    assert verdict.culprit is None and not verdict.working


def test_the_median_of_recent_samples_outvotes_one_odd_reading():
    samples = {"a": [GpuSample(100, 43), GpuSample(100, 44), GpuSample(100, 43)],
               "b": [GpuSample(100, 43), GpuSample(0, 4), GpuSample(100, 44)],
               "c": [GpuSample(96, 20), GpuSample(96, 21), GpuSample(96, 20)]}
    assert read_gpus(samples).culprit == "c"


def test_a_node_without_a_reading_is_said_and_not_blamed():
    verdict = read_gpus({"a": [GpuSample(100, 43)], "b": [GpuSample(None, None)],
                         "c": [GpuSample(100, 44)], "d": [GpuSample(96, 20)]})
    assert verdict.culprit == "d" and verdict.evidence.endswith("no reading: b")


class FakeHead:
    def __init__(self, status, body=b""):
        self.status, self.body = status, body

    def get(self, path, timeout):
        assert path == "/metrics"
        return self.status, self.body


def group_reading(engine: str, head: FakeHead):
    """A GroupWatch whose rank 0 answers as head does (no fleet: progress alone)."""
    from sparkrack.lifecycle.containers import Rank
    from sparkrack.lifecycle.watch import GroupWatch

    class Probe(GroupWatch):
        head = None

    ranks = [Rank("spark-01", 0, "r0", engine, "512k", "d", "running", None, 120)]
    group = Probe(None, None, ranks, http_port=1, health_path="/health", stall_budget_s=30)
    group.head = head
    return group


def test_a_rank_0_without_metrics_is_said_once_stalls_go_unseen():
    group = group_reading("sglang", FakeHead(404))
    assert group._check_progress(None) is None
    assert group.unwatched == ("rank 0 serves no sglang metrics at /metrics (404): a stalled "
                               "group is not seen; SGLang serves them with --enable-metrics "
                               "in the profile")
    served = group_reading("vllm", FakeHead(200, VLLM.format(
        running=0, waiting=0, prompt=1, generated=1).encode()))
    served._check_progress(None)
    assert served.unwatched is None
