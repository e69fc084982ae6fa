"""Onboarding a new Spark, or replacing a failed one: `invoke onboard` (run.py).

- trust.py     step 1: host key fetch, fingerprint, known_hosts decisions and edits
- baseline.py  step 2: facts of the new node and the members, the differences (pure)
- stage.py     step 4: the rack's images and the model weights from a peer
- verify.py    step 5: engine-port reachability both ways, burn check
- join.py      step 6: the line-based hosts.yml edit that keeps every other line
- run.py       the steps in order, each with a verdict (`onboard`)
"""

from sparkrack.onboard.run import (
    OnboardReport,
    Step,
    as_json,
    known_bad_kernels,
    onboard,
)

__all__ = ["OnboardReport", "Step", "as_json", "known_bad_kernels", "onboard"]
