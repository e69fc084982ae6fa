"""Serving the model, top-level commands: `plan` (what each rank would run, touching nothing),
`up`, `down`, `roll` and `break-glass`."""

import shlex

from sparkrack.cli.common import (
    INVENTORY_HELP,
    WAIT_HELP,
    inventory_from,
    operator_task,
    rack_task,
)
from sparkrack.cli.flags import task
from sparkrack.core import console
from sparkrack.core.errors import SparkrackError

COLLECTION = None

DEFAULT_PROFILE = "512k"


@task(help={"engine": "sglang or vllm (a profile: the inventory's overrides, else shipped)",
            "profile": f"profile name (default: {DEFAULT_PROFILE})",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts",
            "offline": "do not read the nodes' env files: show the inventory's view"})
@operator_task
def plan(c, engine, profile=DEFAULT_PROFILE, inventory=None, json=False, offline=False):
    """Print each rank's exact `docker run` and where its variables come from.

    Changes nothing. The environment is read from each node's env files (one round trip,
    read-only); a node that does not answer shows the inventory's view. Secrets show as ***."""
    from sparkrack.engines import docker_run_argv, lane_specs, resolve_lane
    from sparkrack.engines.option_names import checked_against
    from sparkrack.provision.envfiles import rack_view

    rack = inventory_from(inventory)
    lane = resolve_lane(rack, engine, profile)  # the profile file read once (engines/lane.py)
    definition, chosen = lane.definition, lane.profile
    checked = checked_against(lane.version, lane.options)
    view = rack_view(rack, lane.image_key, offline=offline)
    specs = lane_specs(rack, lane, node_env=view.envs)
    specs = lane_specs(rack, lane, node_env=view.envs,
                       cache=_cache_key(rack, specs[0].image, offline))
    head = specs[0]
    if head.experimental:
        console.say(f"warning: {engine} profile '{profile}' is experimental: {head.note}")
    if json:
        console.print_json({
            "engine": engine, "profile": profile, "deployment_id": head.deployment_id,
            "spec_hash": head.spec_hash, "experimental": head.experimental, "note": head.note,
            "options": checked, "engine_version": definition.version.version,
            "unreachable": view.unreachable, "env_problems": view.problems,
            "ranks": [{**spec.as_dict(), "docker_run": shlex.join(docker_run_argv(spec))}
                      for spec in specs]})
        return
    print(f"# {engine} {profile}: {chosen.description}")
    print(f"# image {head.image}, context {definition.setting(chosen, 'context_length')}, "
          f"KV {definition.setting(chosen, 'kv_cache_dtype')}, {len(specs)} ranks")
    print(f"# flags checked against {checked}")
    print(f"# deployment {head.deployment_id}, spec hash {head.spec_hash}")
    print(f"# health http://{rack.head.address}:{head.ports['http']}{head.health_path}, "
          f"ready timeout {head.ready_timeout_s} s, stop timeout {head.docker.stop_timeout_s} s")
    for line in network_lines(rack):
        print(line)
    print(cache_line(specs))
    for line in env_lines(specs, view):
        print(line)
    for spec in specs:
        role = " (head)" if spec.is_head else ""
        print(f"\n# rank {spec.rank} on {spec.node}{role}")
        for key in own_vars(specs, spec):
            print(f"#   {key}={spec.shown_env()[key]}  <- {spec.env_sources[key]}")
        print(shlex.join(docker_run_argv(spec)))


def _cache_key(rack, image: str, offline: bool):
    """The compile caches' key `up` would use: the image's ID on the head and each node's
    GPU arch (one round trip); not asked (--offline) or not answered: placeholders."""
    from sparkrack.engines import CacheKey
    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle.cachefolders import probe_key

    if offline:
        return CacheKey(offline=True)
    try:
        with Fleet(rack) as fleet:
            found = probe_key(fleet, image)
    except SparkrackError:
        return CacheKey(offline=True)
    return CacheKey(found.image_id, found.compute_caps, offline=True)


def cache_line(specs) -> str:
    """Where each rank's compiled kernels are kept (engines/compilecaches.py)."""
    from sparkrack.engines.compilecaches import CACHE_MOUNT
    from sparkrack.lifecycle.cachefolders import cache_gate_lines

    _, where = cache_gate_lines(specs, {})
    return (f"# compile caches: {where} -> {CACHE_MOUNT} (kept on the node: a restart of "
            "this image does not compile again; `invoke caches`)")


def network_lines(rack) -> list[str]:
    """Which network each part of a deployment uses: management for what this machine
    does (SSH, docker, the health check), the fabric for what the ranks do together."""
    head = rack.head
    return [f"# management network (ansible_host, {head.name} {head.address}): SSH, docker, "
            "the health check and the API",
            f"# fabric (roce_addr, {head.name} {head.roce_addr}): the rendezvous, NCCL, each "
            "rank's advertised address, image and weight transfers"]


def env_lines(specs, view) -> list[str]:
    """The environment header of `plan`: which view, problems, the variables every rank
    shares (value and source)."""
    if view.offline:
        lines = ["# environment: the inventory's view (--offline: the nodes were not asked)"]
    elif not view.unreachable:
        lines = ["# environment: read from each node's env files"]
    elif len(view.unreachable) == len(specs):
        lines = ["# environment: the inventory's view (no node's env files could be read: "
                 f"{next(iter(view.unreachable.values()))})"]
    else:
        lines = ["# environment: read from each node's env files; the inventory's view for "
                 + ", ".join(f"{n} ({why})" for n, why in view.unreachable.items())]
    lines += [f"# NOT READY: {p} (run `invoke provision`)" for p in view.problems]
    shared = [key for key in specs[0].env if all(
        key in s.env and (s.env[key], s.env_sources[key]) == (specs[0].env[key],
                                                              specs[0].env_sources[key])
        for s in specs)]
    lines.append("# every rank:" if shared else "# no variable is the same on every rank")
    lines += [f"#   {key}={specs[0].shown_env()[key]}  <- {specs[0].env_sources[key]}"
              for key in shared]
    return lines


def own_vars(specs, spec) -> list[str]:
    """The variables of spec that are not the same (value and source) on every rank."""
    first = specs[0]
    return [key for key in spec.env if not all(
        key in s.env and (s.env[key], s.env_sources[key]) == (first.env.get(key),
                                                              first.env_sources.get(key))
        for s in specs)]


ENGINE_HELP = {"engine": "sglang or vllm", "profile": f"profile name (default: {DEFAULT_PROFILE})",
               "inventory": INVENTORY_HELP,
               "timeout": "readiness timeout in seconds (default: the profile's ready_timeout_s)",
               "override_power": "start even if the power projection exceeds the strip; "
                                 "give the reason (it is recorded with the deployment)",
               "json": "print the deployment record (with its phase times) as JSON",
               "fabric_check": "also gate on `fabric.check`: a full-size frame and a burst on "
                               "every rail",
               "allow_degraded": "start even if a node's NCCL would run on fewer rails than "
                                 "nccl_ib_hca gives it, or over TCP (said, and recorded in the "
                                 "audit log)",
               **WAIT_HELP}


def _progress(waiting):
    def show(p):
        waiting.update(f"{p.running}/{p.total} ranks running, {p.joined}/{p.total} loaded, "
                       f"head /health {p.head_status or '-'} ({p.elapsed:.0f} s)", p.elapsed)
    return show


@task(help=ENGINE_HELP)
@rack_task()
def up(c, engine, profile=DEFAULT_PROFILE, inventory=None, timeout=None, override_power=None,
       json=False, fabric_check=False, allow_degraded=False):
    """Start a TP8 engine: gates, workers, rank 0, readiness, a smoke request.

    Gates: reachable, env files, no other engine, rules, image ID, weights, memory, clock
    cap under load, power (leftovers are cleared while the burn runs). Any failure or Ctrl-C
    stops every rank it started."""
    from sparkrack.lifecycle import lanes

    start_lane(lanes.up, "up: {deployment} serving at {url}", engine, profile, inventory,
               timeout, override_power, json, fabric_check, allow_degraded)


def start_lane(start, said: str, engine, profile, inventory, timeout, override_power,
               as_json: bool, fabric_check: bool = False, allow_degraded: bool = False) -> None:
    """up or roll (start: lifecycle.up or .roll) of the engine's profile, resolved once
    (engines/lane.py), with a progress display; then the record as JSON on stdout, or said
    (with {deployment} and {url}) and the phase times."""
    from dataclasses import asdict

    from sparkrack.engines import lane_url, resolve_lane

    rack = inventory_from(inventory)
    lane = resolve_lane(rack, engine, profile)
    with console.Waiting(f"{engine} {profile}") as waiting:
        deployment = start(rack, lane, timeout=float(timeout) if timeout else None,
                           override_power=override_power, on_progress=_progress(waiting),
                           on_event=console.say, fabric_check=bool(fabric_check),
                           allow_degraded=bool(allow_degraded))
    url = lane_url(rack, lane.definition)
    if as_json:
        console.print_json({**asdict(deployment), "url": url})
        return
    console.say(said.format(deployment=deployment.describe(), url=url))
    console.say("phases: " + ", ".join(f"{name} {seconds:.2f} s"
                                        for name, seconds in deployment.phases.items()))


@task(help={"inventory": INVENTORY_HELP,
            "timeout": "stop timeout per rank in seconds (default: the label the spec set)",
            **WAIT_HELP})
@rack_task()
def down(c, inventory=None, timeout=None):
    """Stop the running engine: rank 0 first (drain), then the workers.

    The containers are removed; `down` ends when every node's MemAvailable recovered."""
    from sparkrack.lifecycle import lanes

    report = lanes.down(inventory_from(inventory), timeout=int(timeout) if timeout else None,
                        on_event=console.say)
    if not report.stopped:
        console.say("no engine was running")
    problems = {**report.errors, **report.not_recovered}
    for where, why in problems.items():
        console.say(f"{where}: {why}")
    if problems:
        from invoke.exceptions import Exit

        raise Exit(f"down finished with {len(problems)} problem(s)", code=1)
    console.say(f"down in {report.seconds:.1f} s; memory recovered on every node")


@task(name="break-glass", help={
    "reason": "why (goes into the audit record), e.g. 'spark-01 lost power'",
    "inventory": INVENTORY_HELP,
    "timeout": "seconds of SIGTERM per rank before SIGKILL (default: 10)",
    "grace": "seconds the head must answer nothing, here and from every worker, before "
             "anything is stopped (default: 30)",
    "yes": "do not ask (needed without a terminal)"})
@operator_task
def break_glass(c, reason, inventory=None, timeout=None, grace=None, yes=False):
    """The head is gone: stop every engine that answers, without the lock.

    Only when the head answers nothing, here and from every worker, for --grace seconds (a
    changed host key, a refused login or a partition is refused: nothing stopped). No drain
    (rank 0 is gone): SIGKILL after --timeout. Recorded in the local audit copy and on every
    node reached; `invoke down` clears the head's deployment record once it answers again
    (or `onboard --replace` replaces it)."""
    import sys

    from sparkrack.core.errors import UsageError
    from sparkrack.lifecycle.breakglass import WORKER_STOP_TIMEOUT
    from sparkrack.lifecycle.breakglass import break_glass as stop_without_head
    from sparkrack.lifecycle.headgone import GRACE_S

    rack = inventory_from(inventory)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("break-glass stops engines without the rack lock: confirm it",
                             fix="add --yes (no terminal to ask on)")
        console.err.print(f"Stop every engine on {rack.vars.rack_name} without the rack lock "
                          f"({rack.head.name} must not answer)? [y/N] ", end="", markup=False)
        if input().strip().lower() not in ("y", "yes"):
            raise UsageError("break-glass not confirmed", fix="answer y, or pass --yes")
    report = stop_without_head(rack, reason, on_event=console.say,
                               timeout=int(timeout) if timeout else WORKER_STOP_TIMEOUT,
                               grace=GRACE_S if grace is None else grace)
    for node, why in sorted(report.unreachable.items()):
        console.say(f"{node}: not reached ({why})")
    for where, why in sorted(report.errors.items()):
        console.say(f"{where}: {why}")
    if report.errors:
        from invoke.exceptions import Exit

        raise Exit(f"break-glass finished with {len(report.errors)} problem(s)", code=1)
    console.say(f"break-glass: {len(report.stopped)} rank(s) stopped in {report.seconds:.1f} s "
                f"(recorded); once {report.head} answers: invoke down")


@task(help=ENGINE_HELP)
@rack_task()
def roll(c, engine, profile=DEFAULT_PROFILE, inventory=None, timeout=None, override_power=None,
         json=False, fabric_check=False, allow_degraded=False):
    """Switch lanes; on failure bring the last known-good deployment back.

    The new deployment is gated while the old one serves; then the old stops in order, the
    new starts and answers a smoke request."""
    from sparkrack.lifecycle import lanes

    start_lane(lanes.roll, "rolled to {deployment}", engine, profile, inventory, timeout,
               override_power, json, fabric_check, allow_degraded)
