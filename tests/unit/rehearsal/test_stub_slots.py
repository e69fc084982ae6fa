"""The stub engine's running slots admit waiting requests first come, first served, as
SGLang's and vLLM's schedulers do (rehearsal/stub/slots.py)."""

from __future__ import annotations

import threading
import time

from sparkrack.rehearsal.stub.slots import FifoSlots


def test_a_freed_slot_goes_to_the_longest_waiter_never_to_a_newcomer():
    slots, admitted, lock = FifoSlots(2), [], threading.Lock()
    slots.acquire()
    slots.acquire()  # both slots run

    def request(name: str) -> None:
        slots.acquire()
        with lock:
            admitted.append(name)

    waiters = []
    for index in range(6):  # they queue in this order
        waiters.append(threading.Thread(target=request, args=(f"w{index}",), daemon=True))
        waiters[-1].start()
        deadline = time.monotonic() + 30
        while slots.waiting() < index + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    for index in range(6):
        slots.release()  # a running request ends; a newcomer asks right away
        newcomer = threading.Thread(target=request, args=(f"new{index}",), daemon=True)
        newcomer.start()
        deadline = time.monotonic() + 30  # w(index) in, the newcomer queued behind the rest
        while (len(admitted) < index + 1 or slots.waiting() < 6) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
    assert admitted == [f"w{index}" for index in range(6)]
    for index in range(2):
        slots.release()
        deadline = time.monotonic() + 30
        while len(admitted) < 7 + index and time.monotonic() < deadline:
            time.sleep(0.01)
    assert admitted[6:] == ["new0", "new1"]
