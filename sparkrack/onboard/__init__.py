"""Onboarding a new Spark, or replacing a failed one: `invoke onboard` (run.py).

- context.py   what every step works on: the report, the new node, the fleet, the options
- scratch.py   the scratch inventory (with the new node) and fleet steps 2-5 run against
- trust.py     step 1: host key fetch, fingerprint, known_hosts decisions and edits
- baseline.py  step 2: facts of the new node and the members, the differences
- provision.py step 3: the operator's go-ahead, the roles on the new node only
- stage.py     step 4: the rack's images and the model weights from a peer
- verify.py    step 5: engine-port reachability both ways (remote/probe.py), burn check
- join.py      step 6: the line-based hosts.yml edit that keeps every other line
- outlets.py   step 6 too: the PDU's outlet map follows a replacement
- run.py       the sequence: the steps in order, each with a verdict (`onboard`), the
               summary and JSON
Each step module's `run(ctx)` holds that step's policy.
"""

from sparkrack.onboard.context import OnboardReport, Step
from sparkrack.onboard.run import as_json, onboard

__all__ = ["OnboardReport", "Step", "as_json", "onboard"]
