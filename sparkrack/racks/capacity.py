"""Whether the other racks can carry the fleet while one rack rolls (docs/fleet.md#rolling):
pure logic, no SSH. Refused when another rack is not ready in the router, or when no other
ready rack serves the same model with at least the rolled rack's context (a request it
accepts must fit elsewhere); a warning when the others' combined concurrent-request limit
is below the router's in-flight load now (the rest queue there while the rack rolls).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lane:
    """What one rack serves, as the capacity check sees it."""

    rack: str
    model: str  # its served model name (the router routes by it)
    serving: str | None  # "sglang 512k"; None when nothing serves
    context: int | None = None  # its context length flag; None: the model's own (the most)
    limit: int | None = None  # requests it runs at once; None: the engine sizes it itself
    limit_flag: str = "the limit flag"  # --max-running-requests, --max-num-seqs
    router: str = "ready"  # its state in the router: ready, draining, not registered, ...

    @property
    def ready(self) -> bool:
        return self.serving is not None and self.router == "ready"

    def describe(self) -> str:
        """'rack2 serves sglang 512k of M (context 524288, 2 at once), ready in the router'."""
        if self.serving is None:
            return f"{self.rack} serves nothing"
        context = "the model's own context" if self.context is None else f"context {self.context}"
        limit = "" if self.limit is None else f", {self.limit} at once"
        return (f"{self.rack} serves {self.serving} of {self.model} ({context}{limit}), "
                f"{self.router} in the router")


@dataclass(frozen=True)
class Verdict:
    """The check's outcome: a refusal (nothing may be drained), else maybe a warning."""

    refusal: str | None = None
    fix: str | None = None
    warning: str | None = None
    said: str = ""  # one line: what carries the fleet while the rack rolls


def fits(rolled: Lane, other: Lane) -> bool:
    """Whether every request rolled accepts also fits other: same model, context at least
    as long (None, the model's own, is the longest)."""
    if other.model != rolled.model:
        return False
    if other.context is None:
        return True
    return rolled.context is not None and other.context >= rolled.context


def decide(rolled: Lane, others: list[Lane], in_flight: int) -> Verdict:
    """The verdict for taking rolled out of the fleet while others carry in_flight requests
    (the router's load now, every rack's)."""
    summary = "; ".join(other.describe() for other in others) or "no other rack"
    not_ready = [other for other in others if not other.ready]
    if not others or not_ready:
        why = "; ".join(o.describe() for o in not_ready) if not_ready else "no other rack"
        return Verdict(f"{rolled.rack} not taken out of the fleet: {why}",
                       "invoke fleet.status; bring those racks back first", said=summary)
    if rolled.serving is None:  # nothing to carry (the roll itself stops at it)
        return Verdict(said=summary)
    carriers = [other for other in others if fits(rolled, other)]
    if not carriers:
        context = ("the model's own context" if rolled.context is None
                   else f"context {rolled.context}")
        return Verdict(f"{rolled.rack} not taken out of the fleet: no other rack serves "
                       f"{rolled.model} with {context} as {rolled.rack} does ({rolled.serving})"
                       f"; {summary}",
                       f"roll another rack first, or put one on a lane of {rolled.model} "
                       "with at least that context; invoke fleet.status", said=summary)
    said = (f"while {rolled.rack} rolls: {'; '.join(c.describe() for c in carriers)}; "
            f"{in_flight} request(s) in flight in the router")
    limits = [c.limit for c in carriers]
    if any(limit is None for limit in limits):
        return Verdict(said=said)
    combined = sum(limits)  # type: ignore[arg-type]
    if combined >= in_flight:
        return Verdict(said=said)
    names = ", ".join(c.rack for c in carriers)
    flags = sorted({c.limit_flag for c in carriers})
    return Verdict(said=said, warning=(
        f"{in_flight - combined} request(s) will queue on {names} while {rolled.rack} rolls: "
        f"{in_flight} in flight in the router, {names} run{'s' if len(carriers) == 1 else ''} "
        f"{combined} at once ({' / '.join(flags)})"))
