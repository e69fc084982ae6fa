"""Step 4, stage: the rack's engine images and model weights onto the new node, from a peer,
by the image chain and weights' one-hop chain (docs/onboarding.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkrack.fleet import Fleet
from sparkrack.inventory import Node
from sparkrack.onboard.context import Context
from sparkrack.onboard.outcomes import ImageOutcome
from sparkrack.provision.images import resolve_images
from sparkrack.transfer.chain import DEFAULT_PYTHON, Progress
from sparkrack.transfer.images import (
    ImageTarget,
    distribute,
    verify,
)
from sparkrack.transfer.manifest import MANIFEST_NAME, rack_manifest
from sparkrack.transfer.models import read_manifests
from sparkrack.transfer.weights import Source, StageReport, stage


def rack_images(refs: Sequence[str], facts: Mapping[str, object], order: Sequence[str],
                head: str) -> dict[str, ImageTarget]:
    """{ref: the rack's image} from the members' gathered images (no source tar: the rack's
    own IDs, never a tar on this machine)."""
    return resolve_images({ref: "" for ref in refs}, facts, order, head)


def stage_images(fleet: Fleet, targets: Mapping[str, ImageTarget], member_facts: Mapping,
                 new: Node, preferred: Sequence[str], *, python: str = DEFAULT_PYTHON,
                 check: bool = False, timeout: float = 3600.0,
                 on_progress: Progress | None = None) -> list[ImageOutcome]:
    """Each rack image onto new from the first preferred peer that has its ID."""
    outcomes = []
    for ref, target in targets.items():
        if target.image_id is None:
            outcomes.append(ImageOutcome(ref, None, "", error=target.error))
            continue
        have = verify(fleet, target, [new]).get(new.name)
        holders = [n for n in preferred if (getattr(member_facts.get(n), "images", None) or {})
                   .get(ref) == target.image_id]
        source = holders[0] if holders else target.source.partition(":")[2]
        outcome = ImageOutcome(ref, target.image_id, source, present=have == target.image_id)
        if not outcome.present and not check:
            chain = ImageTarget(ref, target.image_id, f"node:{source}")
            outcome.transfer = distribute(fleet, chain, [new], python=python, timeout=timeout,
                                          on_progress=on_progress)
            outcome.error = outcome.transfer.errors.get(new.name)
        outcomes.append(outcome)
    return outcomes


def stage_weights(fleet: Fleet, members: Sequence[Node], new: Node, peers: Sequence[str],
                  model_path: str, *, python: str = DEFAULT_PYTHON, bwlimit: float | None = None,
                  full_verify: bool = False, check: bool = False,
                  on_event=lambda line: None, on_progress: Progress | None = None
                  ) -> tuple[StageReport | None, str | None]:
    """(the staging report, None) of the rack's weights onto new from the first of peers
    holding the rack's manifest; (None, why) when no member holds one."""
    texts = read_manifests(fleet, members, model_path)
    text, holders, others = rack_manifest(texts)
    if text is None:
        return None, (f"no member has {model_path}/{MANIFEST_NAME}: stage the model with "
                      f"`invoke weights.stage --model {model_path}` first")
    if others:
        on_event(f"manifest differs or is missing on {', '.join(others)}: not used as sources")
    name = next((p for p in peers if p in holders), holders[0])
    source = next(m for m in members if m.name == name)
    return stage(fleet, Source(model_path, source), [new], model_path, manifest_text=text,
                 python=python, bwlimit=bwlimit, full_verify=full_verify, check=check,
                 attempts=1, on_event=on_event,
                 on_progress=on_progress or (lambda node, done, total: None)), None


def peers(ctx: Context) -> list[str]:
    """Members to take data from, preferred first: --peer, then by rank from the last
    (the head serves the API: spared when possible)."""
    head = ctx.work.head.name
    order = sorted((m for m in ctx.members if m.name != head), key=lambda m: -m.rank)
    names = [m.name for m in order] + ([head] if head != ctx.new.name else [])
    if ctx.options.peer:
        names = [ctx.options.peer] + [n for n in names if n != ctx.options.peer]
    return names


def run(ctx: Context) -> None:
    """Step 4: the rack's images, then its weights, onto the new node (docs/onboarding.md)."""
    report, new, work, options = ctx.report, ctx.new, ctx.work, ctx.options
    with ctx.step("stage") as step:
        refs = list(work.vars.images.values())
        member_facts = {n: f for n, f in report.facts.items() if n != new.name and f.ok}
        targets = rack_images(refs, member_facts, [m.name for m in ctx.members],
                              work.head.name if work.head.name != new.name
                              else ctx.members[0].name)
        preferred = peers(ctx)
        report.images = stage_images(ctx.fleet, targets, member_facts, new, preferred,
                                     python=options.python, check=report.check,
                                     on_progress=options.on_progress)
        for outcome in report.images:
            ctx.line(step, f"image {outcome.line()}")
        image_errors = [o for o in report.images if o.error]
        report.weights, missing = stage_weights(
            ctx.fleet, ctx.members, new, preferred, work.vars.model_path,
            python=options.python, bwlimit=options.bwlimit,
            full_verify=options.full_verify, check=report.check,
            on_event=lambda text: ctx.line(step, f"weights: {text}"),
            on_progress=options.on_progress and (
                lambda node, done, total: options.on_progress(f"{node} weights", done, total)))
        if missing:
            ctx.stop(step, "failed", missing)
        weights = report.weights
        problems = [o.line() for o in image_errors] + weights.errors
        if problems:
            ctx.stop(step, "failed", "; ".join(problems))
        if report.check:
            ctx.set(step, "would", f"images: {sum(not o.present for o in report.images)} "
                    f"to send; weights: {weights.summary()}")
            return
        changed = any(o.transfer for o in report.images) or weights.copied
        ctx.set(step, "changed" if changed else "ok",
                f"images: {', '.join(o.line() for o in report.images)}; weights: "
                f"{weights.summary()}")
