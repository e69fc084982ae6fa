"""What a node that answers nothing over SSH is (pure): a wedged host, or one cut off from
the network or its power, from the PDU's reading of its outlet and whether its kernel still
takes a TCP connection (docs/watchdog.md#a-wedged-host).

- **wedged**: SSH unanswered while the node's kernel still takes TCP on its SSH port (a
  connection made, no SSH greeting, or refused: something runs there) and its outlet,
  where read, is on and draws: a host wedged by unified-memory exhaustion
  (open-gpu-kernel-modules#1358), which only a power cycle brings back. Its cable and its
  power are fine: the kernel answered through them.
- **unreachable: power**: its outlet is switched off, or draws under NO_POWER_W.
- **unreachable: cable or a silent kernel**: nothing answers, not even its kernel, while
  its outlet draws: its cable or switch port, or a host wedged so hard its kernel is silent
  too (the first public report's form); nothing here tells them apart, so it is named and
  never power-cycled by the watchdog (the safe side: docs/field-notes.md).
- **unreachable**: nothing answers and the PDU gave no reading of its outlet.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.pdu.nodeoutlets import OutletReading

# Under this an outlet feeds no running Spark: a GB10 idles at 25-37 W at the wall (public
# reviews); a switched-on outlet feeding a powered-off unit reads its brick's standby, a few W
NO_POWER_W = 10
WEDGED, NO_POWER, CUT_OFF, UNKNOWN = "wedged", "unreachable: power", \
    "unreachable: cable or a silent kernel", "unreachable"
# what a TCP connection to the node's SSH port did (FleetRack.kernel_answers)
TAKEN, REFUSED, NO_ANSWER, GREETED = "taken", "refused", "no answer", "greeted"


@dataclass(frozen=True)
class Silence:
    """One node that did not answer this poll: what it is, in one line for the operator."""

    node: str
    kind: str  # WEDGED, NO_POWER, CUT_OFF or UNKNOWN
    line: str
    outlet: str = ""  # "pdu:outlet", where the inventory maps one
    watts: int | None = None  # the outlet's draw, where read


def judge(node: str, why: str, pdu: str | None, outlet: int | None,
          reading: OutletReading | None, tcp: str) -> Silence:
    """What node is, SSH having failed with why: outlet is the inventory's for it (None:
    none), reading the PDU's of that outlet (None: not read), tcp what a connection to its
    SSH port did (TAKEN, REFUSED, NO_ANSWER or GREETED)."""
    lost = f"node {node} lost ({why})"
    named = f"{pdu}:{outlet}" if pdu and outlet is not None else ""
    watts = reading.watts if reading is not None else None
    where = f"{pdu} outlet {outlet}" if named else ""
    draw = f"{where} draws {watts} W" if where and watts is not None else ""
    if reading is not None and not reading.on:
        return Silence(node, NO_POWER, (
            f"{lost}: unreachable: power: {where} is switched off; switch it on (the PDU's "
            "own interface), then `invoke up` once it answers"), named, watts)
    if watts is not None and watts < NO_POWER_W:
        return Silence(node, NO_POWER, (
            f"{lost}: unreachable: power: {draw}, no running Spark: its power cord, its "
            "brick or its power button; then `invoke up` once it answers"), named, watts)
    if tcp in (TAKEN, REFUSED):
        kernel = "taking" if tcp == TAKEN else "refusing"
        power = f", while {draw}" if draw else (
            f" ({where}: its draw not read)" if where else " (no PDU outlet mapped to it)")
        return Silence(node, WEDGED, (
            f"{lost}: wedged: SSH unanswered, its kernel still {kernel} TCP on the SSH "
            f"port{power}: a host wedged by unified-memory exhaustion (NV_ERR_NO_MEMORY, no "
            f"OOM kill) comes back only through a power cycle: `invoke power-cycle -n {node}`"),
            named, watts)
    if tcp == GREETED:
        return Silence(node, UNKNOWN, f"{lost}; its sshd greets again now: slow, not silent",
                       named, watts)
    if draw:
        return Silence(node, CUT_OFF, (
            f"{lost}: unreachable: cable or a silent kernel: nothing answers, not even its "
            f"kernel, while {draw}: it is powered; check its network cable and switch port "
            f"(link lights); if the link is up the host is wedged: `invoke power-cycle -n "
            f"{node}`"), named, watts)
    return Silence(node, UNKNOWN, (
        f"{lost}: unreachable: nothing answers, not even its kernel, and no PDU reading "
        "tells its power from its cable: check both"), named, watts)
