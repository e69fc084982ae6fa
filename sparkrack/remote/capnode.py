"""A Node's clock-cap record, as the node agent writes it (capagent.py) and an engine pod's
gate reads it (capgate.py); sparkrack/export names the same keys in the pods, the RBAC and
the admission policy. Stdlib only, Python 3.7 or later.

- LABEL "true" places engine pods (scheduling only);
- TAINT (NoExecute) is on while the last verdict is not ok: a running engine pod is evicted;
- the annotations say the last verdict, when it was made and in which boot of the node.

A verdict holds for the boot it was made in (the `nvidia-smi -lgc` lock does not survive a
reboot, a node label does) and for FRESH_S: `refusal` is what an engine pod's gate asks.
"""

import calendar
import time

from .capjudge import OK

LABEL = "sparkrack.io/clock-cap-verified"
TAINT = "sparkrack.io/clock-cap-unverified"
VERDICT = "sparkrack.io/clock-cap-verdict"  # "VERDICT: reason"
CHECKED = "sparkrack.io/clock-cap-checked"  # when, UTC (STAMP)
BOOT = "sparkrack.io/clock-cap-boot-id"  # the node's boot id when it was judged
ANNOTATIONS = (VERDICT, CHECKED, BOOT)
GATE_CONTAINER = "cap-gate"  # the engine pods' first init container (capgate.py)
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"  # the kernel's: a container sees the host's
FRESH_S = 900  # an ok older than this admits no new engine pod (the agent checks every 600 s)
SKEW_S = 300  # a verdict stamped further in the future than this is not believed
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def read_boot_id(path=BOOT_ID_FILE):
    with open(path) as handle:
        return handle.read().strip()


def stamp(epoch):
    return time.strftime(STAMP, time.gmtime(epoch))


def epoch_of(text):
    try:
        return calendar.timegm(time.strptime(text, STAMP))
    except (TypeError, ValueError):
        return None


def record_of(node):
    """(verdict, reason, checked epoch or None, boot id) of a Node object ('' when absent)."""
    annotations = node.get("metadata", {}).get("annotations") or {}
    verdict, _, reason = annotations.get(VERDICT, "").partition(": ")
    return verdict, reason, epoch_of(annotations.get(CHECKED)), annotations.get(BOOT, "")


def refusal(node, boot_id, now, fresh_s=FRESH_S):
    """'' when an engine pod may start on node (an ok of boot boot_id, at most fresh_s old),
    else why not, one clause."""
    verdict, reason, checked, boot = record_of(node)
    if not verdict:
        return "no clock-cap verdict on this node: its node agent has not judged it"
    if boot != boot_id:
        return ("its verdict ({}) belongs to boot {} and the node runs boot {}: the clock lock "
                "did not survive the reboot".format(verdict, boot or "?", boot_id))
    if verdict != OK:
        return f"its last verdict is {verdict}: {reason}"
    if checked is None or now - checked > fresh_s or checked - now > SKEW_S:
        return ("its last ok (%s) is not within the last %d s: no agent has judged it since"
                % (stamp(checked) if checked is not None else "no time", fresh_s))
    return ""


def taints_for(node, verdict):
    """node's taints with TAINT (NoExecute, the verdict as its value) unless verdict is ok;
    None when that is what it has already."""
    have = (node.get("spec") or {}).get("taints") or []
    want = [t for t in have if t.get("key") != TAINT]
    if verdict != OK:
        mine = [t for t in have if t.get("key") == TAINT]
        want.append(dict(mine[0]) if mine else {})
        want[-1].update(key=TAINT, value=verdict.lower().replace(" ", "-"), effect="NoExecute")
    return None if want == have else want
