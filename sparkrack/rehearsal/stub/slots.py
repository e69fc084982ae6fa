"""The stub engine's running slots (--max-running-requests / --max-num-seqs), taken in
arrival order: SGLang's and vLLM's schedulers admit waiting requests first come, first
served (their default policy, `fcfs`), so a request never waits behind one that arrived
after it (docs/rehearsal.md#the-stub-engines)."""

from __future__ import annotations

import threading


class FifoSlots:
    """A counting semaphore whose waiters are admitted in the order they asked (Python's
    own lets a newcomer take a freed slot before a woken waiter, which then waits again
    behind everyone: under load a request could wait many turns)."""

    def __init__(self, slots: int):
        self._cond = threading.Condition()
        self._issued = 0  # tickets handed out, in arrival order
        self._admitted = slots  # tickets below this may run

    def acquire(self) -> None:
        """Wait for a slot, behind every earlier request."""
        with self._cond:
            ticket = self._issued
            self._issued += 1
            self._cond.wait_for(lambda: ticket < self._admitted)

    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        with self._cond:
            return max(0, self._issued - self._admitted)

    def release(self) -> None:
        with self._cond:
            self._admitted += 1
            self._cond.notify_all()
