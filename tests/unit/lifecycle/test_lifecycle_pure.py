"""Pure parts of the engine lifecycle: start/stop order and the memory-ratchet detector."""

from sparkrack.lifecycle.order import start_order, stop_order
from sparkrack.watchdog.leak import LeakWatch

GIB = 1 << 20  # in kB


def test_start_order_is_all_workers_then_head():
    assert start_order(list(range(8)), lambda r: r) == [[7, 6, 5, 4, 3, 2, 1], [0]]


def test_stop_order_is_head_alone_then_all_workers():
    assert stop_order([3, 0, 7, 1], lambda r: r) == [[0], [1, 3, 7]]
    assert stop_order([2, 5], lambda r: r) == [[2, 5]]  # no head left: workers only


def test_ratchet_warns_once_after_three_new_lows():
    leak = LeakWatch(floor_kb=6 * GIB)
    warnings = [leak.feed(t, kb) for t, kb in
                [(0, 100 * GIB), (10, 98 * GIB), (20, 98 * GIB), (30, 95 * GIB), (40, 95 * GIB)]]
    assert warnings[:3] == [None, None, None]
    assert warnings[3].startswith("MemAvailable ratcheting down: 5.0 GiB lost over 3 new lows in 30 s")
    assert "floor 6.0 GiB" in warnings[3]
    assert warnings[4] is None  # said once


def test_memory_that_comes_back_is_not_a_leak():
    leak = LeakWatch(floor_kb=6 * GIB)
    samples = [(0, 100 * GIB), (1, 97 * GIB), (2, 100 * GIB), (3, 97 * GIB), (4, 100 * GIB),
               (5, 97 * GIB), (6, 100 * GIB)]
    assert all(leak.feed(t, kb) is None for t, kb in samples)


def test_small_wobble_is_not_a_new_low():
    leak = LeakWatch(floor_kb=6 * GIB)
    assert all(leak.feed(t, 100 * GIB - t * 1024) is None for t in range(50))


def test_growing_scratch_that_is_given_back_is_not_a_leak():
    """The bounded indexer budget: each request takes more, and gives all of it back."""
    leak = LeakWatch(floor_kb=6 * GIB)
    t, warnings = 0.0, []
    for dip in (0.5, 1, 2, 4, 8):  # GiB taken during each request
        for _ in range(4):  # two seconds of request at 0.5 s per sample
            warnings.append(leak.feed(t, int((100 - dip) * GIB)))
            t += 0.5
        for _ in range(6):  # three seconds idle: all of it back
            warnings.append(leak.feed(t, 100 * GIB))
            t += 0.5
    assert warnings == [None] * len(warnings)
