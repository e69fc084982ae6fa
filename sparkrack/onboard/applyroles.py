"""Step 3, provision: the roles onto the new node only, after the operator said yes.

Every role of the roles' site.yml but engine_images: step 4 brings the rack's own image
IDs from a peer instead. `confirm` asks before the node is changed (skipped by --yes and
in a check; without a terminal it refuses); a check plans the roles and says how many
changes they would make.
"""

from __future__ import annotations

from sparkrack.onboard.context import Context
from sparkrack.provision import provision, roles_path, site_roles

IMAGE_ROLE = "engine_images"  # step 4 brings the rack's own image IDs from a peer instead


def confirm(ctx: Context) -> None:
    """Stop (provision refused) unless the operator agrees to change the node."""
    if ctx.check or ctx.options.assume_yes:
        return
    step = ctx.report.step("provision")
    ask = ctx.options.confirm
    if ask is None:
        ctx.stop(step, "refused", "not confirmed (non-interactive): pass --yes to "
                 "provision, stage, verify and join the node")
    what = (f"replace {ctx.report.replace} (rank {ctx.old.rank})" if ctx.old
            else "join as a spare")
    if not ask(f"Provision {ctx.report.name}, stage images and weights on it, "
               f"verify it and {what}?"):
        ctx.stop(step, "refused", "not confirmed by the operator")


def run(ctx: Context) -> None:
    """Step 3: apply (or, in a check, plan) the roles on the new node."""
    report, new = ctx.report, ctx.new
    roles = [r for r in site_roles(roles_path(ctx.work.path)) if r != IMAGE_ROLE]
    with ctx.step("provision") as step:
        result = provision(ctx.work, (new,), roles=roles, check=report.check)
        report.provision = result
        node_run = result.node(new.name)
        changes = [c for c in node_run.plan if c.changed]
        for change in changes:
            ctx.line(step, f"{change.role}: {change.task}: {change.summary}")
        counts = result.recap(new.name)
        if report.check:
            if result.exit_code:
                ctx.stop(step, "failed", node_run.error or "the plan failed")
            ctx.set(step, "would", f"would apply {len(changes)} change(s) of roles "
                    f"{', '.join(roles)}")
            return
        if result.exit_code:
            bad = [c for c in node_run.outcomes() if c.status == "failed"]
            ctx.stop(step, "failed", node_run.error or (bad[0].summary if bad else "failed"))
        ctx.set(step, "changed" if counts["changed"] else "ok",
                f"{counts['changed']} changed, {counts['ok']} ok ({', '.join(roles)}; "
                f"{result.seconds:.1f} s)")
