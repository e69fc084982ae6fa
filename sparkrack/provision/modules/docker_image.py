"""docker_image: an image present on the node with the one right image ID.

The right ID per ref is resolved for the whole rack before planning (images.py:
`resolve_images`: the source tar's, else the head node's, else the one the nodes agree on,
or the pinned `id`); a node that holds another ID or none gets a `Transfer`, which the
runner applies across nodes at once (images.py: `distribute`, a pipelined chain, relays
run with `python`). Absent mode removes the image.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from sparkrack.facts.docker import IMAGES, normalize_ref
from sparkrack.provision.changes import Change, Run, Transfer
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.params import Param
from sparkrack.provision.roletasks import Task
from sparkrack.transfer.images import short_id

NAME = "docker_image"
PARAMS = {
    "name": Param("str", "the image ref", "vllm/vllm-openai:v0.33.0", required=True),
    "id": Param("str", "the image ID pinned: the source's must be this one",
                "sha256:4f1c9e7a0b2d"),
    "source_tar": Param("str", "a `docker save` tar on this machine the image comes from "
                        "(default: the head node's image)", "/srv/images/vllm.tar"),
    "python": Param("str", "the python the image's relays run with on the nodes",
                    "python3"),
}


def plan(step: Step) -> Change:
    """A Transfer of the rack's image for ref when the node does not hold its ID."""
    base, p, facts = step.base, step.params, step.facts
    ref = normalize_ref(str(p["name"]))
    if facts.images is None:
        return replace(base, status="failed",
                       summary=f"docker did not list images: {facts.images_error}")
    present = facts.images.get(ref)
    if step.state.absent:
        if present is None:
            return replace(base, summary=f"{ref} absent")
        return replace(base, status="changed", summary=f"{ref}: remove",
                       actions=(Run(("docker", "image", "rm", ref)),))
    target = step.images.get(ref)
    if target is None or target.error or not target.image_id:
        why = target.error if target else "no source resolved"
        return replace(base, status="failed", summary=f"{ref}: {why}")
    pinned = str(p.get("id") or "")
    if pinned and target.image_id != pinned:
        return replace(base, status="failed", summary=(
            f"{ref}: the source {target.source} has {short_id(target.image_id)}, not the "
            f"pinned {short_id(pinned)}"))
    if present == target.image_id:
        return replace(base, summary=f"{ref} {short_id(present)}")
    now = f"has {short_id(present)}" if present else "missing"
    return replace(base, status="changed",
                   summary=f"{ref}: {now}, load {short_id(target.image_id)} from {target.source}",
                   actions=(Transfer(ref, target.image_id, target.source),))


def sources(tasks: Iterable[Task]) -> dict[str, str]:
    """{ref: source tar ('' for none)} of the docker_image tasks among tasks."""
    return {str(t.params["name"]): str(t.params.get("source_tar") or "")
            for t in tasks if t.module == NAME and not t.error}


def relay_python(tasks: Iterable[Task], default: str) -> str:
    """The python the image relays run with: the first docker_image task's, else default."""
    return next((str(t.params["python"]) for t in tasks
                 if t.module == NAME and t.params.get("python")), default)


MODULE = Module(
    name=NAME,
    params=PARAMS,
    queries=lambda p: [IMAGES],
    plan=plan,
)
