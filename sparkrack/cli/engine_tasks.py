"""Engine tasks: `plan` shows what a deployment would run on each rank, touching nothing."""

import shlex

from invoke import task

from .. import console
from ..engines import build_specs, docker_run_argv, load_engine
from .common import INVENTORY_HELP, inventory_from, operator_task

DEFAULT_PROFILE = "512k"


@task(help={"engine": "sglang or vllm (a file in the inventory's or the repo's engines/)",
            "profile": f"profile name (default: {DEFAULT_PROFILE})",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def plan(c, engine, profile=DEFAULT_PROFILE, inventory=None, json=False):
    """Print every rank's launch spec as the exact `docker run` equivalent (secrets ***);
    contacts no node."""
    rack = inventory_from(inventory)
    specs = build_specs(rack, engine, profile)
    head = specs[0]
    if head.experimental:
        console.say(f"warning: {engine} profile '{profile}' is experimental: {head.note}")
    if json:
        console.print_json({
            "engine": engine, "profile": profile, "deployment_id": head.deployment_id,
            "spec_hash": head.spec_hash, "experimental": head.experimental, "note": head.note,
            "ranks": [{**spec.as_dict(), "docker_run": shlex.join(docker_run_argv(spec))}
                      for spec in specs]})
        return
    definition = load_engine(rack.path, engine)
    chosen = definition.profile(profile)
    print(f"# {engine} {profile}: {chosen.description}")
    print(f"# image {head.image}, context {definition.setting(chosen, 'context_length')}, "
          f"KV {definition.setting(chosen, 'kv_cache_dtype')}, {len(specs)} ranks")
    print(f"# deployment {head.deployment_id}, spec hash {head.spec_hash}")
    print(f"# health http://{rack.head.address}:{head.ports['http']}{head.health_path}, "
          f"ready timeout {head.ready_timeout_s} s, stop timeout {head.docker.stop_timeout_s} s")
    for spec in specs:
        role = " (head)" if spec.is_head else ""
        print(f"\n# rank {spec.rank} on {spec.node}{role}")
        print(shlex.join(docker_run_argv(spec)))
