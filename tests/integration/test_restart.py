"""Power-safe restarts on the rehearsal rack: batches, verification, a latched GPU stops it."""

import pytest

from sparkrack.lifecycle.restart import RebootStopped, restart_rack
from sparkrack.rehearsal import nodeproc

pytestmark = pytest.mark.rack


def boots(rack) -> dict[str, list[int]]:
    return {n.name: nodeproc.boot_times(n) for n in rack.nodes}


def test_restart_rack_in_batches_of_two(engine_rack, rack):
    inventory = engine_rack
    before = boots(rack)
    report = restart_rack(inventory, batch_size=2)
    after = boots(rack)
    assert all(len(after[n]) == len(before[n]) + 1 for n in after)  # every node rebooted once
    assert [[r.node for r in batch] for batch in report.batches] == [
        ["spark-08", "spark-07"], ["spark-06", "spark-05"], ["spark-04", "spark-03"],
        ["spark-02", "spark-01"]]
    windows = [(r.requested, r.back) for batch in report.batches for r in batch]
    assert all(r.verdict == "ok" for batch in report.batches for r in batch)
    for t in sorted({t for window in windows for t in window}):  # never more than 2 down
        assert sum(start <= t < end for start, end in windows) <= 2
    for earlier, later in zip(report.batches, report.batches[1:], strict=False):  # a batch boots after the
        assert min(after[r.node][-1] for r in later) >= int(max(r.back for r in earlier))  # last is back


def test_a_latched_gpu_stops_the_sequence_at_its_batch(engine_rack, rack):
    inventory = engine_rack
    rack.latch("spark-05")
    before = boots(rack)
    try:
        with pytest.raises(RebootStopped) as stopped:
            restart_rack(inventory, batch_size=2)
    finally:
        rack.poweroff("spark-05")  # only a full power removal clears the latch
        rack.poweron("spark-05")
    message = stopped.value.line()
    assert "batch 2: spark-05" in message and "needs a full power removal" in message
    after = boots(rack)
    rebooted = sorted(n for n in after if len(after[n]) > len(before[n]))
    assert rebooted == ["spark-05", "spark-06", "spark-07", "spark-08"]
    assert not rack.status()[4].latched
